"""SGLang behind the engine seam (engines/base.py), seed 001's second production route: the model's safetensors
checkpoint at the pinned revision (downloaded, verified and mounted read-only by kimik3: the container gets no token
and needs no network), the image pulled by digest, loading = the port refuses connections (SGLang starts its HTTP
server once the schedulers have loaded the weights; /health answers 503 while it warms up), `sglang:*` metrics
(served with --enable-metrics, which kimik3 renders), the reasoning in `message.reasoning_content`.

No SGLang server runs on kimik3's test machines (its PyPI wheel needs CUDA; its CPU path is a source build for AMX
Xeons): what is checked here is the rendered argv, against SGLang's own argument parser (tests/unit/engines/test_sglang_argv.py).
`ENGINE` is what the registry (model/engine_names.py, `engines.engine_for("sglang")`) hands out.
"""

from __future__ import annotations

from typing import Any

from kimik3_reconciler.engines.base import HostNeeds, LaunchedByModule, NativeRoute, Readiness, ServerSeries, TuneKnobs
from kimik3_reconciler.engines.native_route import NativeRoutes
from kimik3_reconciler.engines.sglang import launch
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.profile import Profile


class Sglang(LaunchedByModule, NativeRoutes):
    """SGLang's OpenAI server (`sglang serve`), as seed 001's TP8/DCP8 cookbook profile runs it; what it shares with
    vLLM is CheckpointDefaults' (engines/base.py)."""

    name = "sglang"
    server = "sglang serve"
    launch = launch
    # One name (0.5.23's --served-model-name is a str); its Python OpenAI routes answer any `model` (not its Rust
    # server, SGLANG_RUST_SERVER=1, which kimik3 does not set): seed 001's `moonshotai/Kimi-K3` is answered too.
    answers_any_name = True
    # sglang 0.5.23 (srt/entrypoints/http_server.py): launch_server waits for the schedulers to load the weights
    # before it binds the port, then /health is 503 while the server warms up (ServerStatus.Starting).
    # Its fixed start-up until a launch here is recorded: assumed as vLLM's (no SGLang server runs on kimik3's test
    # machines), since it too starts its schedulers, profiles memory and captures CUDA graphs before it binds.
    readiness = Readiness(
        "/health", "refused", fixed_s=30.0, fixed_source="assumed as vLLM's: no SGLang launch measured by kimik3"
    )
    # sglang 0.5.23 srt/observability/metrics_collector.py (with --enable-metrics).
    series = ServerSeries.openai("sglang:", "num_running_reqs", "num_queue_reqs")
    # SGLang's chat completion message (srt/entrypoints/openai/protocol.py) carries it as reasoning_content.
    reasoning_field = "reasoning_content"
    tune_knobs = TuneKnobs("sglang", ("mem_fraction_static",))  # sglang.<knob> (launch.py: why only this one)
    native_route = NativeRoute(
        {"tp_size": 8, "dcp_size": 8, "mem_fraction_static": 0.85, "any_gpu": False},  # the schema's defaults
        "tp{gpus}-dcp{dcp_size}",
        "seed 001's SGLang cookbook profile (TP8/DCP8, verified on 8x B300; needs "
        "sglang.mamba_full_memory_ratio from the cookbook's calculator)",
        rank=1,
        because="seed 001: SGLang for lower-level serving control (vLLM is not feasible here)",
    )

    def host_needs(self, profile: Profile) -> HostNeeds:
        knobs = profile.sglang
        # Seed 001: the cookbook's verified profile is 8x B300 (tp 8), "do not copy it to H100/H200, GB200/GB300,
        # AMD"; the seed gives R580+ for the CUDA 13 K3 image (vLLM's), which kimik3 applies to SGLang's too.
        return HostNeeds(
            min_driver=launch.MIN_DRIVER,
            gpus=knobs.tp_size,
            gpu_kinds=() if knobs.any_gpu else launch.GPU_KINDS,
            source="seed 001: SGLang's Kimi-K3 cookbook, verified on 8x B300 (R580+ as for the CUDA 13 K3 image)",
            kinds_override="sglang.any_gpu",
            memory_share=knobs.mem_fraction_static,
            gpus_field="sglang.tp_size",
            # A route's section (planning/routes.py) holds the recipe's knobs only: no cluster there.
            hosts=cluster.size if (cluster := getattr(knobs, "cluster", None)) is not None else 1,
            hosts_field="sglang.cluster",
            pipeline=getattr(knobs, "pp_size", None) or 1,
        )

    def request_room(self, profile: Profile, trained: int | None) -> tuple[int, str]:
        # kimik3 renders no --context-length: SGLang takes the checkpoint's (Kimi-K3's trained 1,048,576)
        return trained or 1_048_576, "the checkpoint's context (SGLang's default --context-length)"

    def tune_space(self, profile: Profile, observed: Observed) -> dict[str, tuple[Any, ...]]:
        return launch.tune_space(profile)


ENGINE = Sglang()
