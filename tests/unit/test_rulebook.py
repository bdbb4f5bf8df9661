"""Every rule in the rulebook names the tests that exercise it, and they exist."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kimik3_reconciler.model.rulebook import RULES

TESTS = Path(__file__).resolve().parents[1]


def test_rule_ids_are_unique_and_cases_exist() -> None:
    assert len({r.id for r in RULES}) == len(RULES)
    for rule in RULES:
        for case in rule.cases:
            assert (TESTS / case).is_file(), f"{rule.id}: tests/{case} missing"
        assert rule.cases or rule.enforced_by.startswith("not yet"), rule.id


def test_explain_prints_the_reason_and_refuses_unknown_rules() -> None:
    run = [sys.executable, "-m", "kimik3_reconciler", "explain"]
    shown = subprocess.run([*run, "spec-draft-device"], capture_output=True, text=True)
    assert shown.returncode == 0 and "graph reservation" in shown.stdout
    unknown = subprocess.run([*run, "spec-draft-devise"], capture_output=True, text=True)
    assert unknown.returncode == 2 and "did you mean 'spec-draft-device'" in unknown.stderr
