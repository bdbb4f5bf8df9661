"""llama.cpp behind the engine seam (engines/base.py): GGUF quants served by llama-server, built from pinned
source (Dockerfile.llamacpp), loading = /health 503, `llamacpp:*` metrics, `reasoning_content`.

`ENGINE` is what the registry (model/engine_names.py, `engines.engine_for("llamacpp")`) hands out.
"""

from __future__ import annotations

from typing import Any

from kimik3_reconciler.engines.base import (
    BenchKnobs,
    EnginePlan,
    ImageSource,
    ModelSource,
    Readiness,
    RouteCandidate,
    ServerSeries,
    SlotStore,
    TuneKnobs,
    WeightHeaders,
)
from kimik3_reconciler.engines.llamacpp import (
    drafts,
    host_findings,
    image,
    launch,
    perplexity,
    placement,
    routes,
    rpc,
    server_log,
    sizing,
    smoke,
    vram_fit,
)
from kimik3_reconciler.model.facts import HostFacts, ModelFact, Observed
from kimik3_reconciler.model.labels import SLOTS_MOUNT
from kimik3_reconciler.model.launch_input import LaunchInput
from kimik3_reconciler.model.profile import Profile, ServeSpec
from kimik3_reconciler.model.route import Route


class LlamaCpp:
    """llama-server (mainline or the Kimi-K3 fork), as seed 000 runs it."""

    name = "llamacpp"
    server = "llama-server"
    served_name_flag, answers_any_name = "--alias", True
    routes_base = routes.BASE  # the registry's default engine: `kimik3 routes` without a profile
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
        # b11434 tools/server/server-task.cpp: "Number of prompt tokens reused from the cache" (a slot's or the
        # --cache-ram prompt cache's, counted where the request takes its slot); prompt_tokens_total is "excluding
        # cached tokens", so the prompt is the two added (ServerSeries.prefix_cache).
        prefix_cache_hits_total="llamacpp:prompt_tokens_cached_total",
    )
    reasoning_field = "reasoning_content"
    log_signs = server_log.SIGNS
    smoke = smoke.SMOKE
    quant_scorer = perplexity.SCORER
    workers = rpc.WORKER
    # serve.<knob>; `threads` is no profile field (seed 000 fixes it) and is accepted only to be checked and refused;
    # `load_mode` is serve.load_mode: none or dio, a mapped mode is refused (planning/tune_space.py).
    # Tune: the split (the --n-cpu-moe layers or the --fit margin) is ranked by the forecast; batch follows a searched
    # ubatch (llama.cpp lowers ubatch to batch silently: the candidate would not be the one measured).
    tune_knobs = TuneKnobs(
        "serve",
        ("ubatch", "batch", "parallel", "fit_target", "n_cpu_moe", "threads", "load_mode"),
        split=("n_cpu_moe", "fit_target"),
        line=("parallel", "ubatch", "batch", "load_mode", "threads"),
        placement=("n_cpu_moe", "fit_target", "ubatch", "batch", "parallel"),
        automatic=("n_cpu_moe",),  # unset: --fit decides the split
        raised=(("batch", "ubatch"),),
    )
    load_wire = "native"
    # The serve fields tune moves, and ctx_size, which it cannot: a bench run is filed with them.
    bench_knobs = BenchKnobs(
        filed=(
            "serve.batch",
            "serve.ubatch",
            "serve.fit_target",
            "serve.n_cpu_moe",
            "serve.parallel",
            "serve.ctx_size",
        ),
        labelled=("serve.ubatch", "serve.parallel", "serve.n_cpu_moe", "serve.fit_target"),
    )
    vision_probe = True  # with the fork build's --mmproj (profile.vision)
    native_route = None  # GGUF quants of the catalog: its route candidates (engines/llamacpp/routes.py)
    slot_store = SlotStore("--slot-save-path", SLOTS_MOUNT, "/slots")  # with serve.slot_save (launch.py)
    exact_prefill = True  # /apply-template, then /completion n_predict 0 (ServingEngine.exact_prefill: why)

    @property
    def weight_headers(self) -> WeightHeaders:
        # The GGUF parser is imported where headers are read only (a no-op plan reads the layout's record).
        from kimik3_reconciler.engines.llamacpp.gguf_header import HEADERS

        return HEADERS

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

    def build_recipe(self, profile: Profile, observed: Observed) -> image.Build:
        return image.Build(profile, observed)

    def split_rank(
        self, profile: Profile, observed: Observed, plan: EnginePlan, knobs: dict[str, Any]
    ) -> tuple[Any, ...]:
        from kimik3_reconciler.engines.llamacpp import tune  # tune only

        return tune.split_rank(profile, observed, plan.forecast, knobs)

    def render_plan(self, profile: Profile, observed: Observed) -> EnginePlan:
        # One mode decision (hybrid or all-VRAM) per plan; the placement, the launch's sizing and the gate read it.
        decision = vram_fit.derive_mode(profile, observed)
        runs, note = decision.mode, decision.note(profile)
        serve = (
            ("batch", sizing.batch_for(profile, runs)),
            ("ubatch", sizing.ubatch_for(profile, runs)),
            ("ctx_size", vram_fit.context_total(profile, observed)),
            ("fit_target", profile.fit_target_for(runs)),
        )
        return EnginePlan(
            decision,
            placement.forecast(profile, observed, decision),
            serve,
            (note,) if note else (),
            vram_fit.context_note(profile, observed),
        )

    def host_findings(
        self, profile: Profile, observed: Observed, plan: EnginePlan, stoppable: frozenset[int], ours_running: bool
    ) -> tuple[list[str], list[str]]:
        return host_findings.host_findings(profile, observed, plan.mode, stoppable, ours_running)

    def draft_device(self, profile: Profile, host_gpus: int | None) -> str | None:
        return drafts.draft_device(profile, host_gpus)

    def route_candidates(
        self, base: Profile, host: HostFacts, profile: Profile | None, observed: Observed | None
    ) -> tuple[RouteCandidate, ...]:
        return routes.candidates(base, host, profile, observed)  # the catalog's quants, the gate judges each

    def route_rank(self, route: Route) -> tuple[int, str] | None:
        return routes.rank(route)


ENGINE = LlamaCpp()
