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

from kimik3_reconciler.engines.base import (
    BenchKnobs,
    CheckpointDefaults,
    EnginePlan,
    HostNeeds,
    ImageSource,
    LogSigns,
    ModelSource,
    NativeRoute,
    NodeLaunch,
    Readiness,
    ServerSeries,
    TuneKnobs,
)
from kimik3_reconciler.engines.native_route import NativeRoutes
from kimik3_reconciler.engines.sglang import launch
from kimik3_reconciler.model.facts import ModelFact, Observed
from kimik3_reconciler.model.launch_input import LaunchInput
from kimik3_reconciler.model.profile import Profile, ServeSpec


class Sglang(CheckpointDefaults, NativeRoutes):
    """SGLang's OpenAI server (`sglang serve`), as seed 001's TP8/DCP8 cookbook profile runs it."""

    name = "sglang"
    server = "sglang serve"
    # One name (0.5.23's --served-model-name is a str); its Python OpenAI routes answer any `model` (not its Rust
    # server, SGLANG_RUST_SERVER=1, which kimik3 does not set): seed 001's `moonshotai/Kimi-K3` is answered too.
    served_name_flag, answers_any_name = "--served-model-name", True
    model_source = ModelSource("safetensors")
    image_source = ImageSource("pull")
    # sglang 0.5.23 (srt/entrypoints/http_server.py): launch_server waits for the schedulers to load the weights
    # before it binds the port, then /health is 503 while the server warms up (ServerStatus.Starting).
    # Its fixed start-up until a launch here is recorded: assumed as vLLM's (no SGLang server runs on kimik3's test
    # machines), since it too starts its schedulers, profiles memory and captures CUDA graphs before it binds.
    readiness = Readiness(
        "/health",
        while_loading="refused",
        fixed_s=30.0,
        fixed_source="assumed as vLLM's: no SGLang launch measured by kimik3",
    )
    # sglang 0.5.23 srt/observability/metrics_collector.py (with --enable-metrics).
    series = ServerSeries(
        prefix="sglang:",
        running="sglang:num_running_reqs",
        waiting="sglang:num_queue_reqs",
        generated_tokens_total="sglang:generation_tokens_total",
        prompt_tokens_total="sglang:prompt_tokens_total",
        slots=None,
    )
    # SGLang's chat completion message (srt/entrypoints/openai/protocol.py) carries it as reasoning_content.
    reasoning_field = "reasoning_content"
    tune_knobs = TuneKnobs("sglang", ("mem_fraction_static",))  # sglang.<knob> (launch.py: why only this one)
    load_wire = "openai"
    bench_knobs = BenchKnobs()  # its section's tune knobs file a run (and label it)
    vision_probe = False  # its vision is the checkpoint's, which no check sends an image to yet
    slot_store = None  # no slot save/restore: a rollout prefills the declared hot prompts (fleet/warm.py)
    native_route = NativeRoute(
        {"tp_size": 8, "dcp_size": 8, "mem_fraction_static": 0.85, "any_gpu": False},  # the schema's defaults
        "tp{gpus}-dcp{dcp_size}",
        "seed 001's SGLang cookbook profile (TP8/DCP8, verified on 8x B300; needs "
        "sglang.mamba_full_memory_ratio from the cookbook's calculator)",
        rank=1,
        because="seed 001: SGLang for lower-level serving control (vLLM is not feasible here)",
    )

    log_signs = LogSigns()  # what any server's log says (address in use, out of memory)
    workers = None  # no rpc.workers: its ranks are its own processes
    quant_scorer = None  # the checkpoint, not a quant: no quant gate
    smoke = None  # a pulled image: its first launch's health wait and verify are its test
    weight_headers = None  # a safetensors checkpoint: read generically (observe/served_weights.py)

    def model_entry(self, model: ModelFact) -> str:
        return "."  # the snapshot folder: config.json, the tokenizer, the custom code and the safetensors shards

    def served_names(self, value: LaunchInput) -> tuple[str, ...]:
        return (value.name,)

    def owned_flags(self, threads: int, load_mode: str = "none") -> tuple[str, ...]:
        return launch.OWNED_FLAGS

    def placement_flags(self, serve: ServeSpec, manual_split: bool = True) -> tuple[str, ...]:
        return ()  # tp/dcp sizes are knobs of the `sglang:` section: server_argv renders them

    def server_argv(self, value: LaunchInput, snapshot: str) -> tuple[str, ...]:
        return launch.server_argv(value, snapshot)

    def cluster_launch(self, value: LaunchInput, snapshot: str) -> tuple[NodeLaunch, ...]:
        return launch.cluster_launch(value, snapshot)

    def server_env(self, value: LaunchInput) -> tuple[tuple[str, str], ...]:
        return launch.server_env(value)

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

    def build_recipe(self, profile: Profile, observed: Observed) -> None:
        return None  # its image is pulled by digest (image.ref)

    def render_plan(self, profile: Profile, observed: Observed) -> EnginePlan:
        return EnginePlan()  # the whole checkpoint in VRAM, sized by sglang.mem_fraction_static: no mode, no split


ENGINE = Sglang()
