"""Every rule in the rulebook names the tests that exercise it and the modules that enforce it, and both exist."""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import kimik3_reconciler
from kimik3_reconciler.model.rulebook import BY_ID, RULES

TESTS = Path(__file__).resolve().parents[2]
PACKAGE = Path(kimik3_reconciler.__file__).parent
# `# rule: fixed-flags, kv-types-equal` marks the guard that enforces those rules.
MARK = re.compile(r"#\s*rule:\s*([a-z0-9-]+(?:\s*,\s*[a-z0-9-]+)*)")


def marked_rules(source: str) -> set[str]:
    return {rule_id.strip() for ids in MARK.findall(source) for rule_id in ids.split(",")}


def test_rule_ids_are_unique_and_cases_exist() -> None:
    assert len({r.id for r in RULES}) == len(RULES)
    for rule in RULES:
        for case in rule.cases:
            assert (TESTS / case).is_file(), f"{rule.id}: tests/{case} missing"
        assert rule.cases or not rule.enforced_by, f"{rule.id}: enforced, so a case must test it"


def test_each_enforcing_module_imports_and_marks_the_rule() -> None:
    for rule in RULES:
        for name in rule.enforced_by:
            module = importlib.import_module(name)
            assert rule.id in marked_rules(inspect.getsource(module)), f"{name} has no `# rule: {rule.id}`"


def test_every_rule_mark_is_listed_in_the_rulebook() -> None:
    """A mark left behind by a renamed rule, or a guard the rulebook forgot, fails here."""
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        for rule_id in marked_rules(path.read_text(encoding="utf-8")):
            assert rule_id in BY_ID, f"{module}: `# rule: {rule_id}` names no rule"
            assert module in BY_ID[rule_id].enforced_by, f"{rule_id}: enforced_by omits {module}"


def test_rule_text_says_not_yet_only_for_an_open_gap() -> None:
    for rule in RULES:
        text = f"{rule.statement} {rule.reason}".lower()
        stale = "not yet" in text or "todo" in text
        assert not (stale and rule.enforced_by), f"{rule.id}: enforced by {rule.enforced_by}, yet its text says not yet"
        assert stale or rule.enforced_by, f"{rule.id}: enforced by nothing: say so (an open gap, not yet enforced)"


def test_explain_prints_the_reason_and_refuses_unknown_rules() -> None:
    run = [sys.executable, "-m", "kimik3_reconciler", "explain"]
    shown = subprocess.run([*run, "spec-draft-device"], capture_output=True, text=True)
    assert shown.returncode == 0 and "graph reservation" in shown.stdout
    assert (
        "enforced by: kimik3_reconciler.engines.llamacpp.rules.drafts, kimik3_reconciler.engines.llamacpp.drafts"
        in shown.stdout
    )
    unknown = subprocess.run([*run, "spec-draft-devise"], capture_output=True, text=True)
    assert unknown.returncode == 2 and "did you mean 'spec-draft-device'" in unknown.stderr


def test_every_rule_names_its_seed_passage_and_explain_lists_it() -> None:
    """Issue 14: `kimik3 explain` lists every rule with the seed passage it comes from (or says it is not one)."""
    for rule in RULES:
        assert rule.seed.startswith(("seed 000", "seed 001", "not in the seeds")), f"{rule.id}: {rule.seed!r}"
    listed = subprocess.run([sys.executable, "-m", "kimik3_reconciler", "explain"], capture_output=True, text=True)
    assert listed.returncode == 0
    for rule in RULES:
        assert f"{rule.id} " in listed.stdout and f"from: {rule.seed}" in listed.stdout, rule.id
    shown = subprocess.run(
        [sys.executable, "-m", "kimik3_reconciler", "explain", "fit-target-spill"], capture_output=True, text=True
    )
    assert "from: seed 000 step 2 (REAP770" in shown.stdout


def test_every_profile_rule_finding_sits_under_its_own_rule_mark() -> None:
    """Review of issue 14: guards were added without a rulebook entry. Each `yield error(`/`yield warning(` in
    model/profile_rules/ and the engines' rule modules (engines/llamacpp/rules/, engines/<name>/rules.py; a `return
    error(` too) needs a `# rule:` mark after the previous finding (or its function's start), so a new guard cannot
    skip the rulebook (and so `kimik3 explain`)."""
    unmarked, findings = [], 0
    engines = PACKAGE / "engines"
    paths = [
        *(PACKAGE / "model" / "profile_rules").glob("*.py"),
        *engines.glob("*/rules/*.py"),
        *engines.glob("*/rules.py"),
    ]
    for path in sorted(paths):
        since_mark = False
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            stripped = line.strip()
            if stripped.startswith("def "):
                since_mark = False
            elif MARK.search(line):
                since_mark = True
            elif stripped.startswith(("yield error(", "yield warning(", "return error(", "return warning(")):
                findings += 1
                if not since_mark:
                    unmarked.append(f"{path.relative_to(PACKAGE)}:{number}: {stripped[:70]}")
                since_mark = False
    assert not unmarked, "findings without a `# rule:` mark:\n" + "\n".join(unmarked)
    assert findings >= 30  # it did look


def test_every_rule_function_of_the_profile_rules_package_runs() -> None:
    """model/profile_rules/ and engines/llamacpp/rules/ hold one module per concern (engines/<name>/rules.py another
    engine's own), and each engine's rules module
    lists what runs (the registry's `rules`): a rule function (public, one profile argument, yielding findings) left
    out of them would never run, and no case would say so."""
    import pkgutil

    from kimik3_reconciler.engines.llamacpp import rules as llamacpp_rules
    from kimik3_reconciler.model import profile_rules
    from kimik3_reconciler.model.engine_names import ENGINES
    from kimik3_reconciler.model.profile_rules import rules_for

    listed = {rule for name in ENGINES for rule in rules_for(name)}
    found = []
    packages = (profile_rules, llamacpp_rules)
    names = {f"{p.__name__}.{info.name}" for p in packages for info in pkgutil.iter_modules(p.__path__)}
    for module in map(importlib.import_module, sorted(names | {entry.rules for entry in ENGINES.values()})):
        for name, function in inspect.getmembers(module, inspect.isfunction):
            if function.__module__ != module.__name__ or name.startswith("_"):
                continue
            if list(inspect.signature(function).parameters) == ["p"] and "Finding" in str(function.__annotations__):
                found.append(function)
    assert found and set(found) <= listed, f"not in RULES: {[f.__qualname__ for f in set(found) - listed]}"
    assert listed <= set(found)  # and RULES runs only such functions
