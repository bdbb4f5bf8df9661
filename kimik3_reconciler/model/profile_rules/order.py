"""RULES: every cross-field rule of model/profile_rules/, in the one order they run in, so findings come out in the
same order whatever module holds the rule. Imported only when a profile is validated (check_rules): a no-op plan
reads a cached profile and loads none of the rule modules (docs/design.md "What a no-op plan imports")."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_rules import (
    build,
    drafts,
    listeners,
    no_secrets,
    paths,
    pinned,
    quants,
    server_args,
    serving,
    sglang,
    vllm,
    workers,
)
from kimik3_reconciler.model.profile_rules.finding import Finding

Rule = Callable[[Profile], Iterator[Finding]]

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

# The rules every engine's profile meets (secrets, listeners, literal paths), in RULES' order; the rest of RULES
# weigh llama.cpp's fields (quants, batches, drafts, workers). engine_fields (engines.py) already refused those
# written for another engine.
GENERIC: tuple[Rule, ...] = (
    no_secrets.endpoint,
    no_secrets.secrets,
    listeners.host,
    listeners.systemd,
    listeners.metrics,
    paths.paths_literal,
    pinned.pins,
)
BY_ENGINE: dict[str, tuple[Rule, ...]] = {
    "llamacpp": RULES,
    "vllm": (*GENERIC, vllm.owned_args, vllm.api_key, vllm.tensor_parallel),
    "sglang": (*GENERIC, sglang.section, sglang.owned_args, sglang.topology, sglang.memory_ratio_workload),
}
