"""Cross-field rules of a profile (shared/PROFILE.md; seed 000 says why): pure checks of a validated Profile.

One module per concern (quants, serving, drafts, server_args, no_secrets, paths, build, listeners, workers); RULES
below is the one order they run in, so findings come out in the same order whatever module holds the rule."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_rules import (
    build, drafts, listeners, no_secrets, paths, quants, server_args, serving, workers,
)
from kimik3_reconciler.model.profile_rules.drafts import DRAFT_ROOM_MIB
from kimik3_reconciler.model.profile_rules.finding import FieldPath, Finding
from kimik3_reconciler.model.profile_rules.serving import fit_margin_findings

__all__ = ["DRAFT_ROOM_MIB", "RULES", "FieldPath", "Finding", "check_rules", "fit_margin_findings"]

RULES: tuple[Callable[[Profile], Iterator[Finding]], ...] = (
    build.vision, quants.quant, no_secrets.endpoint, serving.fit_target, serving.ubatch, serving.batch,
    serving.ctx_size, drafts.spec_draft, drafts.spec_type_args, build.variant, no_secrets.secrets,
    server_args.extra_args, listeners.host, build.archive, listeners.systemd, server_args.split_mode, quants.reap,
    serving.cache_ram, listeners.metrics, serving.load_mode, workers.worker_entries, workers.rpc_args,
    build.builtin_patches, paths.paths_literal,
)


def check_rules(profile: Profile) -> tuple[Finding, ...]:
    """Every cross-field finding of a validated profile, errors and warnings, in rule order."""
    return tuple(finding for rule in RULES for finding in rule(profile))
