"""vLLM behind the engine seam (engines/base.py), seed 001's most direct production route: the model's
safetensors checkpoint at the pinned revision (downloaded, verified and mounted read-only by kimik3: the container
gets no token and needs no network), the image pulled by digest (`vllm/vllm-openai:kimi-k3@sha256:…`), loading =
the port refuses connections, `vllm:*` metrics, the reasoning in `message.reasoning`.

`ENGINE` is what the registry (model/engine_names.py, `engines.engine_for("vllm")`) hands out.
"""

from __future__ import annotations

from typing import Any

from kimik3_reconciler.engines.base import (
    HostNeeds,
    LaunchedByModule,
    LogSigns,
    NativeRoute,
    Readiness,
    ServerSeries,
    TuneKnobs,
)
from kimik3_reconciler.engines.native_route import NativeRoutes
from kimik3_reconciler.engines.vllm import launch
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.launch_input import LaunchInput
from kimik3_reconciler.model.profile import Profile


class Vllm(LaunchedByModule, NativeRoutes):
    """vLLM's OpenAI server (`vllm serve`), as seed 001's TP8 recipe runs it; what it shares with SGLang is
    CheckpointDefaults' (engines/base.py)."""

    name = "vllm"
    server = "vllm serve"
    launch = launch
    answers_any_name = False
    # vLLM binds its port only once the engine is up: while loading, connections are refused (TESTING.md §10).
    # Its startup (torch.compile, CUDA graph capture, the KV cache's profiling run) is not a read: 15 minutes of
    # allowance before the weights' read (the tiny CPU test model: /health 200 after 40-50 s, TESTING.md §10).
    # Its fixed start-up until a launch here is recorded: every launch of the CPU test model took 25-28 s (issue 38).
    readiness = Readiness(
        "/health",
        while_loading="refused",
        startup_s=900.0,
        fixed_s=30.0,
        fixed_source="the CPU test model's launches took 25-28 s; GPUs add torch.compile and CUDA graph capture",
    )
    # vLLM 0.32's names (vllm/v1/metrics/loggers.py; a counter's samples carry prometheus_client's `_total`).
    series = ServerSeries.openai(
        "vllm:",
        "num_requests_running",
        "num_requests_waiting",
        "prefix_cache_hits_total",
        "prefix_cache_queries_total",
        ttft="time_to_first_token_seconds",
        itl="inter_token_latency_seconds",
        e2e="e2e_request_latency_seconds",
        kv_usage="kv_cache_usage_perc",
    )
    reasoning_field = "reasoning"
    # A failed start's first Python exception line, raw or logged (vLLM prefixes a process's lines "(EngineCore_DP0
    # pid=56) ", a logged one "ERROR 12-05 13:02:40 [core.py:843] "): its last lines are the API server's
    # "RuntimeError: Engine core initialization failed. See root cause above", the root cause (e.g. "ValueError:
    # current platform cpu does not support ray.") printed a traceback or two earlier.
    log_signs = LogSigns(
        root=r"^(?:\(\w+ pid=\d+\) )?(?:[A-Z]+ \d\d-\d\d [\d:.]+ \[[^\]]*\] )?[A-Za-z_][\w.]*(?:Error|Exception): \S"
    )
    # vllm.<knob> (engines/vllm/tune.py says why these and not tensor parallelism, the backend or the KV dtype).
    tune_knobs = TuneKnobs("vllm", ("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization"))
    native_route = NativeRoute(
        {"tensor_parallel_size": 8, "gpu_memory_utilization": 0.95, "any_gpu": False},  # the schema's defaults
        "tp{gpus}",
        "seed 001's vLLM recipe (TP8, fp8 KV cache, vllm/vllm-openai:kimi-k3)",
        rank=0,
        because="seed 001: on an 8-GPU Blackwell-class server, start with vLLM",
    )

    def served_names(self, value: LaunchInput) -> tuple[str, ...]:
        return launch.served_names(value)

    def host_needs(self, profile: Profile) -> HostNeeds:
        knobs = profile.vllm
        # Seed 001 (the vLLM Kimi K3 recipe): the CUDA 13 image needs driver R580+; at least 8x GB300 (the day-0
        # guide: 8x B300); AMD's MI355X/MI350X take the ROCm image, which NVML does not see.
        return HostNeeds(
            min_driver=(580,),
            gpus=knobs.tensor_parallel_size,
            gpu_kinds=() if knobs.any_gpu else ("B300", "GB300"),
            source="seed 001: vLLM's Kimi K3 recipe (CUDA 13 image, R580+, 8x GB300 or B300)",
            kinds_override="vllm.any_gpu",
            memory_share=knobs.gpu_memory_utilization,
            # A route's section (planning/routes.py) holds the recipe's knobs only: no cluster there.
            hosts=cluster.size if (cluster := getattr(knobs, "cluster", None)) is not None else 1,
            hosts_field="vllm.cluster",
            pipeline=getattr(knobs, "pipeline_parallel_size", None) or 1,
        )

    def request_room(self, profile: Profile, trained: int | None) -> tuple[int, str]:
        return profile.vllm.max_model_len, "vllm.max_model_len"  # vLLM answers a longer request with HTTP 400

    def tune_space(self, profile: Profile, observed: Observed) -> dict[str, tuple[Any, ...]]:
        from kimik3_reconciler.engines.vllm import tune  # tune only

        return tune.default_space(profile, observed)


ENGINE = Vllm()
