"""The CLI prints a plan itself where rich would print it unstyled (console.Stream): the bytes must be rich's.
Every plan case is rendered both ways (plain and verbose); a line rich would rewrite (a tab, a control
character) goes to rich, and so does a terminal or FORCE_COLOR."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console

# the plan cases' own builder, from tests/unit/planning (tests/unit/conftest.py puts every floor on sys.path)
from test_plan_cases import CASES, build_case

from kimik3_reconciler.console import Stream, Styled
from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.plan import Action, Plan, Step
from kimik3_reconciler.planning import plan
from kimik3_reconciler.render import render_plan

PLANS = sorted(p for p in CASES.glob("*.yaml") if not p.name.startswith("_"))


def _both(monkeypatch: pytest.MonkeyPatch, the_plan: Plan, verbose: bool) -> tuple[str, str]:
    plain = io.StringIO()
    monkeypatch.setattr(sys, "stdout", plain)
    render_plan(the_plan, Stream(), verbose=verbose)
    by_rich, stream = io.StringIO(), Stream()
    stream._console = Console(file=by_rich, soft_wrap=True, markup=False, highlight=False)  # what the CLI had
    render_plan(the_plan, stream, verbose=verbose)
    return plain.getvalue(), by_rich.getvalue()


@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.stem)
def test_a_plan_prints_as_rich_printed_it(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    case = yaml.safe_load(path.read_text())
    try:
        the_plan = plan(*build_case(case))
    except PlanError:
        pytest.skip("a refusal: no plan to print")
    for verbose in (False, True):
        plain, by_rich = _both(monkeypatch, the_plan, verbose)
        assert plain == by_rich and plain


def test_lines_rich_would_rewrite_and_terminals_go_to_rich(monkeypatch: pytest.MonkeyPatch) -> None:
    step = Step(kind="model", target="org/m", action=Action.NOOP, reason="tab\there, bell\x07, cr\r end")
    the_plan = Plan(profile="p", steps=(step,))
    plain, by_rich = _both(monkeypatch, the_plan, True)
    assert plain == by_rich and "\t" not in plain and "\x07" not in plain
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert not Stream()._plain()
    monkeypatch.delenv("FORCE_COLOR")
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert Stream()._plain() and not Stream().is_terminal
    assert (Styled("error: ", "red") + Styled("x")).plain == "error: x"


def test_a_table_piped_off_a_terminal_is_never_cut_to_eighty_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Was: `kimik3 bench … | tee` (or a CI log) printed bench's 13 columns in 80, every figure cut to '0.…'.
    Off a terminal a table takes the width it needs; a COLUMNS the user sets still rules."""
    from rich.table import Table

    def printed() -> str:
        piped = io.StringIO()
        monkeypatch.setattr(sys, "stdout", piped)
        table = Table(*(f"column {i} heading" for i in range(13)))
        table.add_row(*(f"{1234.5678 * i:.4f}" for i in range(13)))
        Stream().print(table)
        return piped.getvalue()

    monkeypatch.delenv("COLUMNS", raising=False)
    wide = printed()
    assert "…" not in wide and "14814.8136" in wide
    monkeypatch.setenv("COLUMNS", "80")
    assert "…" in printed()
