"""Rules of an `engine: sglang` profile: the `sglang:` section is required (its mamba_full_memory_ratio has no
default), the SGLang options kimik3 renders itself are not given again in serve.extra_args or serve.env, the
topology fits the GPUs the profile gives, and no API key, which SGLang takes only on its command line."""

from __future__ import annotations

from collections.abc import Iterator

from kimik3_reconciler.engines.owned_options import ADDRESS, CHECKPOINT, OFFLINE_ENV, by_flag, owned_options
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_rules import Rule
from kimik3_reconciler.model.profile_rules.cluster import members
from kimik3_reconciler.model.profile_rules.finding import NEVER_SECRETS, Finding, error, warning
from kimik3_reconciler.model.profile_rules.generic import GENERIC

# SGLang 0.5.23's value when none is given (srt/arg_groups/fields/schedule.py: fallback=0.9), which
# profiles/sglang-tp8.yaml ships: a value nobody computed for a workload.
SGLANG_FALLBACK_RATIO = 0.9

# SGLang options kimik3 renders from the profile (engines/sglang/launch.py): (flags, what to write instead). A second
# copy in extra_args would be parsed after ours (argparse: the last one wins) and move the server behind the plan.
_OWNED: tuple[tuple[tuple[str, ...], str], ...] = (
    (("--model-path", "--model", "--tokenizer-path", "--revision", "--download-dir", "--load-format"), CHECKPOINT),
    (("--served-model-name",), "the served model id is the profile's name"),
    *ADDRESS,
    (("--api-key", "--admin-api-key"), f"SGLang takes keys only on its command line ({NEVER_SECRETS})"),
    (("--trust-remote-code", "--enable-metrics"), "kimik3 always renders it"),
    (("--tp-size", "--tensor-parallel-size", "--tp"), "use sglang.tp_size"),
    (("--dcp-size",), "use sglang.dcp_size"),
    (("--mem-fraction-static",), "use sglang.mem_fraction_static"),
    (("--mamba-full-memory-ratio",), "use sglang.mamba_full_memory_ratio"),
    (("--tool-call-parser",), "use sglang.tool_call_parser"),
    (("--reasoning-parser",), "use sglang.reasoning_parser"),
    (("--nnodes", "--node-rank", "--dist-init-addr"), "kimik3 renders them from sglang.cluster"),
    (("--config",), "a config file would set flags the plan does not see: write them as profile fields"),
)
OWNED_FLAGS = by_flag(_OWNED)
OWNED_ENV: dict[str, str] = dict(OFFLINE_ENV)


def section(p: Profile) -> Iterator[Finding]:
    if p.sglang is None:
        # rule: sglang-memory-ratio
        # Seed 001: --mamba-full-memory-ratio is workload-dependent, computed by the cookbook's calculator from the
        # average input plus output length: there is no default to run with, so the section must be written.
        yield error(
            ("sglang",),
            "is required for engine sglang: at least sglang.mamba_full_memory_ratio, from "
            "SGLang's Kimi-K3 cookbook calculator for your workload's average input + output length "
            "(profiles/sglang-tp8.yaml has seed 001's other flags)",
        )


def memory_ratio_workload(p: Profile) -> Iterator[Finding]:
    knobs = p.sglang
    if knobs is None or knobs.workload is not None:
        return
    ratio = knobs.mamba_full_memory_ratio
    fallback = (
        f" ({ratio:g} is SGLang 0.5.23's own fallback, not a computed value)" if ratio == SGLANG_FALLBACK_RATIO else ""
    )
    # rule: sglang-memory-ratio-workload
    # Seed 001: the ratio is the workload's (average input + output length); SGLang 0.5.23 gives the KDA state
    # r/(1+r) of the memory left after the weights (mem_cache/kv_cache_configurator.py), the KV cache the rest.
    yield warning(
        ("sglang", "mamba_full_memory_ratio"),
        f"{ratio:g} is not tied to a workload{fallback}: SGLang gives "
        f"the Kimi Delta Attention state {100 * ratio / (1 + ratio):.0f} % of the memory left after the "
        "weights and the KV cache the rest; seed 001 computes the ratio with SGLang's Kimi-K3 cookbook "
        "calculator from your average input + output length: write the request it was computed for as "
        "sglang.workload {prompt_tokens, output_tokens}",
    )


def owned_args(p: Profile) -> Iterator[Finding]:
    for where, message in owned_options(p.serve, "sglang", OWNED_FLAGS, OWNED_ENV):
        # rule: sglang-owned-flags
        # A flag kimik3 renders, given again, is parsed after it: the running server is not the profile's (a
        # variable: the option behind the profile's field).
        yield error(where, message)
    if p.serve.api_key_file is not None:
        # rule: sglang-owned-flags
        # sglang 0.5.23 reads its API key from --api-key only (no variable, no file): the key would be in the
        # container's argv, which `docker inspect` and ps show to anyone who can read them.
        yield error(
            ("serve", "api_key_file"),
            "engine sglang takes its API key only as --api-key on the command "
            f"line ({NEVER_SECRETS}): leave api_key_file out and put an authenticating proxy in front, or "
            "use engine vllm",
        )


def topology(p: Profile) -> Iterator[Finding]:
    knobs = p.sglang
    if knobs is None:
        return
    if p.gpus == "none":
        # rule: sglang-topology
        # SGLang's PyPI build and images are CUDA's; its CPU path is a source build for AMX Xeons kimik3 does not make.
        yield error(
            ("gpus",),
            "is none, but engine sglang runs on GPUs only (its CPU path is a source build kimik3 does not make)",
        )
        return
    nodes = knobs.cluster.size if knobs.cluster is not None else 1
    ranks = knobs.tp_size * (knobs.pp_size or 1)
    here = ranks // nodes  # this host's share (cluster-ranks refuses a remainder)
    if isinstance(p.gpus, list) and here > len(p.gpus) and ranks % nodes == 0:
        # rule: sglang-topology
        # One rank per GPU: more ranks than GPUs on this host never start.
        spread = f": {ranks} ranks over {nodes} hosts" if ranks != knobs.tp_size or nodes > 1 else ""
        yield error(
            ("sglang", "tp_size"),
            f"is {knobs.tp_size} but gpus lists {len(p.gpus)}{spread}: one rank per GPU, so at most {len(p.gpus)} here",
        )
    if knobs.tp_size % knobs.dcp_size:
        # rule: sglang-topology
        # sglang 0.5.23 (arg_groups/parallel_hook.py) asserts attn_tp_size % dcp_size == 0 at start: refused here,
        # before the checkpoint download, instead of there.
        yield error(
            ("sglang", "dcp_size"),
            f"is {knobs.dcp_size}, which does not divide sglang.tp_size "
            f"{knobs.tp_size} (seed 001's profile: tp 8, dcp 8)",
        )


def cluster(p: Profile) -> Iterator[Finding]:
    if p.sglang is not None:
        sizes = (("tp_size", p.sglang.tp_size), ("pp_size", p.sglang.pp_size))
        yield from members(p, "sglang", sizes, ("--pp-size", "--pipeline-parallel-size"))


# The rules an `engine: sglang` profile meets, in the order they run (the registry's `rules` for sglang).
RULES: tuple[Rule, ...] = (*GENERIC, section, owned_args, topology, cluster, memory_ratio_workload)
