"""A probe engine, for tests only (tests/unit/engines/test_probe_engine.py): what a fourth engine is, and nothing more.
One folder (this one: the ServingEngine, its rules, its profile cases) and one registry entry (`ENTRY`, which the
test adds to model/engine_names.ENGINES the way a real engine's line sits there), with no generic module edited.

It serves a safetensors checkpoint from a pulled image (`image:` by digest), with no profile section of its own:
`probe-server --model <snapshot> --host … --port …`, ready when /health answers (the port refuses until then)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kimik3_reconciler.engines.base import (
    BenchKnobs,
    CheckpointDefaults,
    EnginePlan,
    HostNeeds,
    ImageSource,
    LogSigns,
    ModelSource,
    Readiness,
    RouteCandidate,
    ServerSeries,
    TuneKnobs,
)
from kimik3_reconciler.model.engine_names import EngineEntry
from kimik3_reconciler.model.facts import HostFacts, ModelFact, Observed
from kimik3_reconciler.model.launch_input import LaunchInput
from kimik3_reconciler.model.profile import Profile, ServeSpec
from kimik3_reconciler.model.route import Route

ENTRY = EngineEntry("support.probe_engine", rules="support.probe_engine.rules", image="pull")
REPO = "probe/Checkpoint"


class Probe(CheckpointDefaults):
    """probe-server: one process, one GPU or none, its checkpoint folder opened whole."""

    name = "probe"
    server = "probe-server"
    served_name_flag, answers_any_name = "--served-model-name", False
    model_source = ModelSource("safetensors")
    image_source = ImageSource("pull")
    readiness = Readiness("/health", while_loading="refused", startup_s=30.0)
    series = ServerSeries(
        prefix="probe:",
        running="probe:requests_running",
        waiting="probe:requests_waiting",
        generated_tokens_total="probe:generation_tokens_total",
        prompt_tokens_total="probe:prompt_tokens_total",
        slots=None,
    )
    reasoning_field = "reasoning"
    tune_knobs = TuneKnobs("serve", ())
    load_wire = "openai"
    bench_knobs = BenchKnobs()  # its section's tune knobs file a run (and label it)
    vision_probe = False
    native_route = None  # its own route (`route_candidates`), no native checkpoint

    log_signs = LogSigns()  # what any server's log says (address in use, out of memory)
    workers = None  # no rpc.workers: its ranks are its own processes
    quant_scorer = None  # the checkpoint, not a quant: no quant gate
    smoke = None  # a pulled image: its first launch's health wait and verify are its test
    weight_headers = None  # a safetensors checkpoint: read generically (observe/served_weights.py)

    def model_entry(self, model: ModelFact) -> str:
        return "."

    def served_names(self, value: LaunchInput) -> tuple[str, ...]:
        return (value.name,)

    def owned_flags(self, threads: int, load_mode: str = "none") -> tuple[str, ...]:
        return ()

    def placement_flags(self, serve: ServeSpec, manual_split: bool = True) -> tuple[str, ...]:
        return ()

    def server_argv(self, value: LaunchInput, snapshot: str) -> tuple[str, ...]:
        served = ("--served-model-name", *self.served_names(value))
        address = ("--host", value.bind, "--port", str(value.serve.port))
        return ("--model", snapshot, *served, *address, *value.serve.extra_args)

    def server_env(self, value: LaunchInput) -> tuple[tuple[str, str], ...]:
        return (("HF_HUB_OFFLINE", "1"),)

    def host_needs(self, profile: Profile) -> HostNeeds:
        return HostNeeds(
            min_driver=(580,),
            gpus=1,
            gpu_kinds=(),
            source="the probe's own needs",
            kinds_override="",
            gpus_field="gpus",
        )

    def request_room(self, profile: Profile, trained: int | None) -> tuple[int, str]:
        return 4096, "the probe's fixed context"

    def tune_space(self, profile: Profile, observed: Observed) -> dict[str, tuple[Any, ...]]:
        return {}

    def build_recipe(self, profile: Profile, observed: Observed) -> None:
        return None  # its image is pulled by digest (image.ref)

    def render_plan(self, profile: Profile, observed: Observed) -> EnginePlan:
        return EnginePlan()

    def route_candidates(
        self, base: Profile, host: HostFacts, profile: Profile | None, observed: Observed | None
    ) -> tuple[RouteCandidate, ...]:
        feasible = host.ram_total is not None and host.ram_total >= 1 << 30
        route = Route("probe", REPO, "cpu", feasible, "the probe serves anything with 1 GiB of RAM")
        ours = profile is not None and profile.engine == self.name
        return (RouteCandidate(None, route=replace(route, profile=ours), ours=ours),)  # decided here, no gate

    def route_rank(self, route: Route) -> tuple[int, str] | None:
        return None  # after every ranked route


ENGINE = Probe()
