"""docs/engines.md stays true: its protocol table lists exactly ServingEngine's members, and every registered
engine has the files its checklist names (its folder's ENGINE and launch.py, its registry line, its rules module's
RULES beginning with the generic rules)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.engines.base import ServingEngine
from kimik3_reconciler.model.engine_names import ENGINES
from kimik3_reconciler.model.profile_rules.generic import GENERIC

ROOT = Path(__file__).resolve().parents[3]
DOC = (ROOT / "docs" / "engines.md").read_text()


def _section(title: str) -> str:
    return DOC.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def test_the_protocol_table_lists_every_member_of_serving_engine() -> None:
    listed = set(re.findall(r"^\| `(\w+)` \|", _section("The protocol"), re.MULTILINE))
    members = set(ServingEngine.__annotations__) | {
        name for name, value in vars(ServingEngine).items() if callable(value) and not name.startswith("_")
    }
    assert listed == members


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_every_engine_has_the_checklists_files(name: str) -> None:
    checklist = _section("Checklist: the files of a new engine")
    entry = ENGINES[name]
    folder = ROOT / Path(*entry.package.split("."))
    for row in re.findall(r"^\| `kimik3_reconciler/engines/<name>/(\S+)` \|", checklist, re.MULTILINE):
        assert (folder / row).is_file(), f"{name}: {row} missing"
    assert isinstance(engine_for(name), ServingEngine) and engine_for(name).name == name
    rules = importlib.import_module(entry.rules).RULES
    assert set(GENERIC) <= set(rules), f"{name}: {entry.rules}.RULES leaves out generic rules"
