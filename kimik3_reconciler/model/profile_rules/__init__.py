"""Cross-field rules of a profile (shared/PROFILE.md; seed 000 says why): pure checks of a validated Profile.

One module per concern (quants, serving, drafts, server_args, no_secrets, paths, build, listeners, workers; engines,
vllm); order.py lists them in the one order they run in, per engine (BY_ENGINE). This package's own import stays light (the finding's
types): the profile's loaded form and the planners import it on every command, and only validating a
profile (check_rules) loads the rule modules."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kimik3_reconciler.model.profile_rules.finding import FieldPath, Finding

if TYPE_CHECKING:
    from kimik3_reconciler.model.profile import Profile

__all__ = ["FieldPath", "Finding", "check_rules"]


def check_rules(profile: Profile) -> tuple[Finding, ...]:
    """Every cross-field finding of a validated profile, errors and warnings, in rule order."""
    from kimik3_reconciler.model.profile_rules.order import BY_ENGINE  # validation only: a cached profile skips it

    return tuple(finding for rule in BY_ENGINE[profile.engine] for finding in rule(profile))
