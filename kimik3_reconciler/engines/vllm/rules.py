"""Rules of an `engine: vllm` profile: the vLLM options kimik3 renders itself (not in serve.extra_args or
serve.env), tensor parallelism against the GPUs the profile gives, seed 001's recipe on the CPU image."""

from __future__ import annotations

from collections.abc import Iterator

from kimik3_reconciler.engines.owned_options import ADDRESS, CHECKPOINT, OFFLINE_ENV, by_flag, owned_options
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_rules import Rule
from kimik3_reconciler.model.profile_rules.cluster import members
from kimik3_reconciler.model.profile_rules.finding import NEVER_SECRETS, Finding, error, warning
from kimik3_reconciler.model.profile_rules.generic import GENERIC

# vLLM options kimik3 renders from the profile (engines/vllm/launch.py): (flags, what to write instead). A second
# copy in extra_args would be parsed after ours (argparse: the last one wins) and move the server behind the plan.
_OWNED: tuple[tuple[tuple[str, ...], str], ...] = (
    (("--model", "--tokenizer", "--revision", "--download-dir", "--load-format", "--hf-config-path"), CHECKPOINT),
    (("--served-model-name",), "the served model ids are the profile's name and model.repo"),
    *ADDRESS,
    (("--api-key",), f"use serve.api_key_file ({NEVER_SECRETS})"),
    (("--hf-token",), f"the container gets no token: kimik3 downloads the checkpoint ({NEVER_SECRETS})"),
    (("--tensor-parallel-size", "-tp"), "use vllm.tensor_parallel_size"),
    (("--max-model-len",), "use vllm.max_model_len"),
    (("--gpu-memory-utilization",), "use vllm.gpu_memory_utilization"),
    (("--kv-cache-dtype",), "use vllm.kv_cache_dtype"),
    (("--max-num-seqs",), "use vllm.max_num_seqs"),
    (("--max-num-batched-tokens",), "use vllm.max_num_batched_tokens"),
    (("--enable-prefix-caching", "--no-enable-prefix-caching"), "use vllm.enable_prefix_caching"),
    (("--prefix-match-unit",), "use vllm.prefix_match_unit"),
    (("--attention-backend",), "use vllm.attention_backend"),
    (("--attention-config",), "use vllm.attention_config"),
    (("--tool-call-parser", "--enable-auto-tool-choice"), "use vllm.tool_call_parser"),
    (("--reasoning-parser",), "use vllm.reasoning_parser"),
    (("--enforce-eager",), "use vllm.enforce_eager"),
    (("--distributed-executor-backend",), "kimik3 renders ray with vllm.cluster (a replica over several hosts)"),
)
OWNED_FLAGS = by_flag(_OWNED)
OWNED_ENV: dict[str, str] = {"VLLM_USE_V2_MODEL_RUNNER": "use vllm.v2_model_runner", **OFFLINE_ENV}


def owned_args(p: Profile) -> Iterator[Finding]:
    for where, message in owned_options(p.serve, "vllm", OWNED_FLAGS, OWNED_ENV):
        # rule: vllm-owned-flags
        # A flag kimik3 renders, given again, is parsed after it: the running server is not the profile's (a
        # variable: the option behind the profile's field).
        yield error(where, message)


def api_key(p: Profile) -> Iterator[Finding]:
    if p.serve.api_key_file is not None:
        # rule: vllm-owned-flags
        # vLLM takes its key from argv (--api-key) or the environment (VLLM_API_KEY), both shown by `docker inspect`;
        # llama-server's --api-key-file has no vLLM twin yet. Refused rather than served without the key.
        yield error(
            ("serve", "api_key_file"),
            "is not supported for engine vllm yet: vLLM reads its key from argv or "
            "the environment, which `docker inspect` shows (a profile never puts a secret there); put an "
            "authenticating proxy in front of it, or use engine llamacpp",
        )


def tensor_parallel(p: Profile) -> Iterator[Finding]:
    size, pipeline, cluster = p.vllm.tensor_parallel_size, p.vllm.pipeline_parallel_size, p.vllm.cluster
    nodes = cluster.size if cluster is not None else 1
    ranks = size * (pipeline or 1)
    here = ranks // nodes  # this host's share (cluster-ranks refuses a remainder)
    if isinstance(p.gpus, list) and here > len(p.gpus) and ranks % nodes == 0:
        # rule: vllm-tensor-parallel
        # vLLM puts one rank on each GPU: more ranks than GPUs on this host never start.
        spread = f": {ranks} ranks over {nodes} hosts" if ranks != size or nodes > 1 else ""
        yield error(
            ("vllm", "tensor_parallel_size"),
            f"is {size} but gpus lists {len(p.gpus)}{spread}: one rank per GPU, so at most {len(p.gpus)} here",
        )
    if p.gpus == "none" and p.vllm.attention_backend is not None:
        # rule: vllm-tensor-parallel
        # gpus: none runs vLLM's CPU build (the test image), whose attention is its own: a GPU backend is refused
        # by the engine at start.
        yield warning(
            ("vllm", "attention_backend"),
            f"{p.vllm.attention_backend} is a GPU attention backend; with gpus: none (vLLM's CPU build) set it to null",
        )


def cluster(p: Profile) -> Iterator[Finding]:
    knobs = p.vllm
    sizes = (
        ("tensor_parallel_size", knobs.tensor_parallel_size),
        ("pipeline_parallel_size", knobs.pipeline_parallel_size),
    )
    yield from members(p, "vllm", sizes, ("--pipeline-parallel-size", "-pp"))
    port = knobs.cluster.port if knobs.cluster is not None else None
    if port is not None and (port == RAY_CLIENT_PORT or RAY_WORKER_PORTS[0] <= port <= RAY_WORKER_PORTS[1]):
        # rule: vllm-ray-port
        # Ray gives its workers 10002-19999 and its client server 10001 by default: a head port among them stops
        # `ray start --head` ("trying to use a port number ... used by other components"), found at the head's start.
        yield error(
            ("vllm", "cluster", "port"),
            f"{port} is one of Ray's own default ports (client server {RAY_CLIENT_PORT}, workers "
            f"{RAY_WORKER_PORTS[0]}-{RAY_WORKER_PORTS[1]}): Ray's head refuses it; leave it null (6379) or choose "
            "another",
        )


# Ray 2.60's `ray start` defaults: its client server's port and its workers' port range.
RAY_CLIENT_PORT = 10001
RAY_WORKER_PORTS = (10002, 19999)

# The rules an `engine: vllm` profile meets, in the order they run (the registry's `rules` for vllm).
RULES: tuple[Rule, ...] = (*GENERIC, owned_args, api_key, tensor_parallel, cluster)
