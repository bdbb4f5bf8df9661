"""llama.cpp behind the engine seam (engines/base.py): GGUF quants served by llama-server, built from pinned
source (Dockerfile.llamacpp), loading = /health 503, `llamacpp:*` metrics, `reasoning_content`.

`ENGINE` is what the registry (model/engine_names.py, `engines.engine_for("llamacpp")`) hands out.
"""

from __future__ import annotations

from typing import Any

from kimik3_reconciler.engines.base import (
    EnginePlan,
    EngineRoutes,
    ImageSource,
    ModelSource,
    Readiness,
    ServerSeries,
    TuneKnobs,
)
from kimik3_reconciler.engines.llamacpp import launch, placement, vram_fit
from kimik3_reconciler.model.facts import GpuFact, HostFacts, ModelFact, Observed
from kimik3_reconciler.model.launch_input import LaunchInput
from kimik3_reconciler.model.profile import Profile, ServeSpec


class LlamaCpp:
    """llama-server (mainline or the Kimi-K3 fork), as seed 000 runs it."""

    name = "llamacpp"
    server = "llama-server"
    served_name_flag, answers_any_name = "--alias", True
    model_source = ModelSource("gguf")
    image_source = ImageSource("build")
    readiness = Readiness("/health", while_loading="503")  # llama-server: 503 "Loading model", then 200
    series = ServerSeries(
        prefix="llamacpp:",
        running="llamacpp:requests_processing",
        waiting="llamacpp:requests_deferred",
        generated_tokens_total="llamacpp:tokens_predicted_total",
        prompt_tokens_total="llamacpp:prompt_tokens_total",
        slots="/slots",
    )
    reasoning_field = "reasoning_content"
    # serve.<knob>; `threads` is no profile field (seed 000 fixes it) and is accepted only to be checked and refused;
    # `load_mode` is serve.load_mode: none or dio, a mapped mode is refused (planning/tune_space.py).
    tune_knobs = TuneKnobs("serve", ("ubatch", "batch", "parallel", "fit_target", "n_cpu_moe", "threads", "load_mode"))
    load_wire = "llamacpp"
    vision_probe = True  # with the fork build's --mmproj (profile.vision)
    native_route = None  # GGUF quants of the catalog: planning/routes.py makes their profiles

    def model_entry(self, model: ModelFact) -> str:
        return launch.first_shard(model)

    def served_names(self, value: LaunchInput) -> tuple[str, ...]:
        return (value.name,)

    def owned_flags(self, threads: int, load_mode: str = "none") -> tuple[str, ...]:
        return launch.owned_flags(threads, load_mode)

    def placement_flags(self, serve: ServeSpec, manual_split: bool = True) -> tuple[str, ...]:
        return launch.placement_flags(serve, manual_split)

    def server_argv(self, value: LaunchInput, snapshot: str) -> tuple[str, ...]:
        return launch.server_argv(value, snapshot)

    def cluster_launch(self, value: LaunchInput, snapshot: str) -> tuple:
        return ()  # its other hosts are RPC workers (rpc:), converged by the worker step

    def server_env(self, value: LaunchInput) -> tuple[tuple[str, str], ...]:
        return ()  # llama-server's environment is serve.env alone

    def host_needs(self, profile: Profile) -> None:
        return None  # the gate reads llama.cpp's needs from the profile's build and quant (planning/host_gate.py)

    def request_room(self, profile: Profile, trained: int | None) -> tuple[int, str]:
        parallel = profile.serve.parallel  # a slot: Profile.slot_context (llama-server without --kv-unified)
        return profile.slot_context(trained), (
            f"parallel={parallel}: a slot holds serve.ctx_size/serve.parallel = "
            f"{profile.ctx_size_for(trained)}/{parallel}"
        )

    def tune_space(self, profile: Profile, observed: Observed) -> dict[str, tuple[Any, ...]]:
        from kimik3_reconciler.engines.llamacpp import tune  # tune only: a plan does not load model/tuning.py

        return tune.default_space(profile, observed)

    def render_plan(self, profile: Profile, observed: Observed) -> EnginePlan:
        # One mode decision (hybrid or all-VRAM), then the placement from it: the gate, the launch and the
        # pre-read ask the same one (vram_fit.derive_mode answers the last profile and observation it decided).
        return EnginePlan(vram_fit.derive_mode(profile, observed), placement.forecast(profile, observed))

    def routes(
        self, host: HostFacts, gpus: tuple[GpuFact, ...], profile: Profile | None, observed: Observed | None
    ) -> EngineRoutes:
        return EngineRoutes(())  # each catalog quant's route is a profile planning/routes.py judges by the gate


ENGINE = LlamaCpp()
