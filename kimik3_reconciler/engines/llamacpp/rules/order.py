"""RULES: the cross-field rules of an `engine: llamacpp` profile (the registry's `rules` for llama.cpp: this
folder's, and those of model/profile_rules/ but the other engines' own), in the one order they run in, so findings come out in the same
order whatever module holds the rule. Imported only when a profile is validated (check_rules): a no-op plan
reads a cached profile and loads none of the rule modules (docs/design.md "What a no-op plan imports")."""

from __future__ import annotations

from kimik3_reconciler.engines.llamacpp.rules import build, drafts, quants, server_args, serving, workers
from kimik3_reconciler.model.profile_rules import Rule, listeners, no_secrets, paths, pinned

RULES: tuple[Rule, ...] = (
    build.vision,
    quants.quant,
    quants.local_source,
    no_secrets.endpoint,
    serving.fit_target,
    serving.ubatch,
    serving.batch,
    serving.ctx_size,
    drafts.spec_draft,
    drafts.spec_type_args,
    build.variant,
    no_secrets.secrets,
    server_args.extra_args,
    listeners.host,
    build.archive,
    listeners.systemd,
    server_args.split_mode,
    quants.reap,
    serving.cache_ram,
    listeners.metrics,
    serving.load_mode,
    workers.worker_entries,
    workers.rpc_args,
    build.builtin_patches,
    paths.paths_literal,
    pinned.pins,
)
