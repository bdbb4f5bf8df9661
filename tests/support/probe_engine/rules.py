"""The probe's profile rules: the generic ones, then its own (a model of the probe's repo only)."""

from __future__ import annotations

from collections.abc import Iterator

from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_rules import Rule
from kimik3_reconciler.model.profile_rules.finding import Finding, error
from kimik3_reconciler.model.profile_rules.generic import GENERIC


def probe_repo(p: Profile) -> Iterator[Finding]:
    if not p.model.repo.startswith("probe/"):
        yield error(("model", "repo"), "the probe serves probe/ checkpoints only")


RULES: tuple[Rule, ...] = (*GENERIC, probe_repo)
