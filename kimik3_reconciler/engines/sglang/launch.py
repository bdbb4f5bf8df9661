"""`sglang serve`'s command line and environment from the launch input: seed 001's verified 8x B300 TP8/DCP8
cookbook profile flag for flag, the model given as the mounted, verified checkpoint folder instead of a repo the
container downloads (no HF_TOKEN: the container never reaches the Hub, HF_HUB_OFFLINE=1 says so).

kimik3 adds, beside the seed's flags: `--served-model-name <profile name>` (verify, bench and the exporter ask for
that id) and `--enable-metrics` (the exporter and `status --watch` read SGLang's /metrics, off by default). The
image is pulled by digest and may have no entrypoint (the SGLang images run what they are given), so the argv
starts with `sglang serve`. profiles/sglang-tp8.yaml renders seed 001's command (tests/golden/sglang-tp8.argv.json;
SGLang's own parser accepts it: tests/unit/engines/test_sglang_argv.py).
"""

from __future__ import annotations

from typing import Any

from kimik3_reconciler.engines.base import NodeLaunch
from kimik3_reconciler.engines.sglang import cluster
from kimik3_reconciler.model.launch_input import LaunchInput
from kimik3_reconciler.model.profile import Profile

COMMAND = ("sglang", "serve")
# Seed 001: the cookbook's verified single-node profile runs on 8x B300 (GB300 is another topology there).
GPU_KINDS = ("B300",)
# Seed 001 states R580+ for the CUDA 13 K3 image (vLLM's); SGLang's K3 builds are held to the same floor (not in the
# seed: an assumption, said in the gate's source text).
MIN_DRIVER = (580,)
# Seed 001's command carries --trust-remote-code: Kimi-K3's checkpoint ships its own model code. The checkpoint is
# the pinned, sha256-verified revision kimik3 mounted read-only, so the code that runs is the code that was pinned.
OWNED_FLAGS: tuple[str, ...] = ("--trust-remote-code", "--enable-metrics")

# `kimik3 tune` searches the static memory share only: tp/dcp are the topology (seed 001: "do not copy this B300
# topology" elsewhere; a new one is a new profile), and mamba_full_memory_ratio is the workload's (the cookbook's
# calculator from the average input + output length), not a speed knob to search.
MEM_FRACTIONS = (0.80, 0.85, 0.90)


def knob_flags(knobs: Any) -> list[str]:
    """The `sglang:` section as flags, in seed 001's order; a null parser leaves SGLang's default (none)."""
    argv = ["--tp-size", str(knobs.tp_size), "--dcp-size", str(knobs.dcp_size)]
    argv += ["--mem-fraction-static", str(knobs.mem_fraction_static)]
    argv += ["--mamba-full-memory-ratio", str(knobs.mamba_full_memory_ratio)]
    if knobs.pp_size is not None:
        argv += ["--pp-size", str(knobs.pp_size)]
    if knobs.reasoning_parser is not None:
        argv += ["--reasoning-parser", knobs.reasoning_parser]
    if knobs.tool_call_parser is not None:
        argv += ["--tool-call-parser", knobs.tool_call_parser]
    return argv


def server_argv(value: LaunchInput, snapshot: str, rank: int = 0) -> tuple[str, ...]:
    """`sglang serve` and its flags: the mounted checkpoint folder, the `sglang:` knobs, where it listens, the
    profile's name as the served id, with sglang.cluster this host's rank (the profile's host: 0); `serve.extra_args`
    last."""
    serve = value.serve
    argv = [
        *COMMAND,
        "--trust-remote-code",
        "--model-path",
        snapshot,
        *knob_flags(value.knobs),
        "--host",
        value.bind,
        "--port",
        str(serve.port),
        "--served-model-name",
        value.name,
        "--enable-metrics",
        *cluster.rank_flags(value.knobs.cluster, rank),
    ]
    return (*argv, *serve.extra_args)


def cluster_launch(value: LaunchInput, snapshot: str) -> tuple[NodeLaunch, ...]:
    """sglang.cluster's hosts (engines/sglang/cluster.py): the same server at each host's rank."""
    return cluster.nodes(value.knobs.cluster, lambda rank: server_argv(value, snapshot, rank))


def server_env(value: LaunchInput) -> tuple[tuple[str, str], ...]:
    """The Hub offline: the checkpoint is mounted; nothing may be fetched, no token is there to fetch with."""
    return (("HF_HUB_OFFLINE", "1"),)


def tune_space(profile: Profile) -> dict[str, tuple[Any, ...]]:
    """mem_fraction_static around the profile's value (kept among the values)."""
    return {"mem_fraction_static": tuple(sorted({*MEM_FRACTIONS, profile.sglang.mem_fraction_static}))}
