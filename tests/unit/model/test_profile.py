"""Profile rules as data: tests/cases/profile/*.yaml hold a profile text and the problems (or
warnings) it must produce, each located by line and field (shared/PROFILE.md, seed 000)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kimik3_reconciler.errors import ProfileError
from kimik3_reconciler.model.profile_schema import profile_json_schema
from kimik3_reconciler.model.profile_source import parse_profile

ROOT = Path(__file__).resolve().parents[3]
CASES = sorted((ROOT / "tests" / "cases" / "profile").glob("*.yaml"))


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_profile_case(path: Path) -> None:
    case = yaml.safe_load(path.read_text())
    if case["expect"] == "ok":
        loaded = parse_profile(case["profile"], "case.yaml")
        warnings = [str(w) for w in loaded.warnings]
        for wanted in case.get("warnings", []):
            assert any(wanted in w for w in warnings), (wanted, warnings)
        if not case.get("warnings"):
            assert warnings == [], warnings
        return
    with pytest.raises(ProfileError) as caught:
        parse_profile(case["profile"], "case.yaml")
    problems = caught.value.problems
    for wanted in case["expect"]:
        matches = [p for p in problems if wanted["message"] in p.message and p.field == wanted["field"]]
        assert matches, (wanted, [str(p) for p in problems])
        if "line" in wanted:
            assert any(p.line == wanted["line"] for p in matches), (wanted, [str(p) for p in matches])
    # Every problem names the file; rendering never shows a traceback.
    assert all(str(p).startswith("case.yaml") for p in problems)


@pytest.mark.parametrize(
    "path",
    sorted(p for p in (ROOT / "profiles").glob("*.yaml") if "\nkind: Fleet" not in p.read_text()),
    ids=lambda p: p.stem,
)
def test_example_profiles_are_valid(path: Path) -> None:
    parse_profile(path.read_text(), str(path))


def test_committed_json_schema_is_current() -> None:
    import json

    committed = json.loads((ROOT / "docs" / "profile.schema.json").read_text())
    assert committed == profile_json_schema(), "regenerate: kimik3 schema > docs/profile.schema.json"
