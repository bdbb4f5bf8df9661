"""`vllm serve`'s command line and environment from the launch input: seed 001's TP8 recipe flag for flag, the model
given as the mounted, verified checkpoint folder instead of a repo the container downloads (no HF_TOKEN: the
container never reaches the Hub, HF_HUB_OFFLINE=1 says so to vLLM). profiles/vllm-tp8.yaml renders exactly the
seed's command (tests/golden/vllm-tp8.json; vLLM's own parser accepts it: tests/unit/engines/test_vllm_render.py)."""

from __future__ import annotations

import json
from typing import Any

from kimik3_reconciler.engines.base import NodeLaunch
from kimik3_reconciler.engines.vllm import cluster
from kimik3_reconciler.model.launch_input import LaunchInput

# Not knobs: the served ids are the profile's name and the repo id (served_names), and tool choice
# follows the parser (seed 001 pairs --enable-auto-tool-choice with --tool-call-parser).
OWNED_FLAGS: tuple[str, ...] = ()


def knob_flags(knobs: Any) -> list[str]:
    """The `vllm:` section as flags, in seed 001's order; a null knob leaves vLLM's default."""
    argv = ["--tensor-parallel-size", str(knobs.tensor_parallel_size)]
    argv += ["--gpu-memory-utilization", str(knobs.gpu_memory_utilization), "--kv-cache-dtype", knobs.kv_cache_dtype]
    if knobs.attention_backend is not None:
        argv += ["--attention-backend", knobs.attention_backend]
    if knobs.attention_config is not None:
        argv += ["--attention-config", json.dumps(knobs.attention_config, separators=(",", ":"))]
    if knobs.prefix_match_unit is not None:
        argv += ["--prefix-match-unit", str(knobs.prefix_match_unit)]
    argv += [
        "--enable-prefix-caching" if knobs.enable_prefix_caching else "--no-enable-prefix-caching",
        "--max-model-len",
        str(knobs.max_model_len),
    ]
    if knobs.max_num_seqs is not None:
        argv += ["--max-num-seqs", str(knobs.max_num_seqs)]
    if knobs.max_num_batched_tokens is not None:
        argv += ["--max-num-batched-tokens", str(knobs.max_num_batched_tokens)]
    if knobs.pipeline_parallel_size is not None:
        argv += ["--pipeline-parallel-size", str(knobs.pipeline_parallel_size)]
    argv += cluster.server_flags(knobs.cluster)
    if knobs.enforce_eager:
        argv += ["--enforce-eager"]
    if knobs.tool_call_parser is not None:
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", knobs.tool_call_parser]
    if knobs.reasoning_parser is not None:
        argv += ["--reasoning-parser", knobs.reasoning_parser]
    return argv


def served_names(value: LaunchInput) -> tuple[str, ...]:
    """The profile's name (first: vLLM's /v1/models lists it first and its metrics' `model_name` is the first;
    verify, bench and the exporter ask for it; a reply carries the name its request sent) and the checkpoint's repo
    id, which seed 001's client examples send (`model: moonshotai/Kimi-K3`)."""
    return tuple(dict.fromkeys((value.name, value.model.repo)))


def server_argv(value: LaunchInput, snapshot: str) -> tuple[str, ...]:
    """vLLM's argv (the image's entrypoint, `vllm serve`, runs it): the mounted checkpoint folder, where it listens,
    the served names, the `vllm:` knobs; `serve.extra_args` last."""
    serve = value.serve
    argv = [
        "--model",
        snapshot,
        "--served-model-name",
        *served_names(value),
        "--host",
        value.bind,
        "--port",
        str(serve.port),
        *knob_flags(value.knobs),
    ]
    return (*argv, *serve.extra_args)


def server_env(value: LaunchInput) -> tuple[tuple[str, str], ...]:
    """What vLLM reads from its environment beside serve.env: the V2 model runner (seed 001) and the Hub offline
    (the checkpoint is mounted; nothing may be fetched, no token is there to fetch with)."""
    env = [("HF_HUB_OFFLINE", "1")]
    if value.knobs.v2_model_runner:
        env.append(("VLLM_USE_V2_MODEL_RUNNER", "1"))
    return (*env, *cluster.server_env(value.knobs.cluster))


def cluster_launch(value: LaunchInput, snapshot: str) -> tuple[NodeLaunch, ...]:
    """vllm.cluster's hosts (engines/vllm/cluster.py); the head's server is `vllm serve` and this argv."""
    return cluster.nodes(value.knobs.cluster, ("vllm", "serve", *server_argv(value, snapshot)))
