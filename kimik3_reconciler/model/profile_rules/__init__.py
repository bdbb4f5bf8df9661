"""Cross-field rules of a profile (shared/PROFILE.md; seed 000 says why): pure checks of a validated Profile.

One module per concern (no_secrets, paths, listeners, pinned, engines; an engine's own in its folder:
engines/llamacpp/rules/, engines/vllm/rules.py, engines/sglang/rules.py); each engine's rules module (its registry
entry's `rules`: engines/vllm/rules.py, engines/sglang/rules.py, engines/llamacpp/rules/order.py) lists its rules in
the one order they run in. This package's own import stays light (the finding's types): the
profile's loaded form and the planners import it on every command, and only validating a profile (check_rules)
loads the rule modules."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from importlib import import_module
from typing import TYPE_CHECKING

from kimik3_reconciler.model.profile_rules.finding import FieldPath, Finding

if TYPE_CHECKING:
    from kimik3_reconciler.model.profile import Profile

__all__ = ["FieldPath", "Finding", "Rule", "check_rules", "rules_for"]

Rule = Callable[["Profile"], Iterator[Finding]]


def check_rules(profile: Profile) -> tuple[Finding, ...]:
    """Every cross-field finding of a validated profile, errors and warnings, in rule order."""
    return tuple(finding for rule in rules_for(profile.engine) for finding in rule(profile))


def rules_for(engine: str) -> tuple[Rule, ...]:
    """The rules of an engine's profile, in the order they run: its registry entry's `rules` module's RULES. Imported
    only when a profile is validated: a cached profile skips them."""
    from kimik3_reconciler.model.engine_names import ENGINES

    rules: tuple[Rule, ...] = import_module(ENGINES[engine].rules).RULES
    return rules
