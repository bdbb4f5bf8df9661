"""A probe engine, for tests only (tests/unit/engines/test_probe_engine.py): what a fourth engine is, and nothing more.
One folder (this one: the ServingEngine, its rules, its profile cases) and one registry entry (`ENTRY`, which the
test adds to model/engine_names.ENGINES the way a real engine's line sits there), with no generic module edited.

It serves a safetensors checkpoint from a pulled image (`image:` by digest), with no profile section of its own:
`probe-server --model <snapshot> --host … --port …`, ready when /health answers (the port refuses until then)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kimik3_reconciler.engines.base import (
    CheckpointDefaults,
    HostNeeds,
    Readiness,
    RouteCandidate,
    ServerSeries,
    TuneKnobs,
)
from kimik3_reconciler.model.engine_names import EngineEntry
from kimik3_reconciler.model.facts import HostFacts, Observed
from kimik3_reconciler.model.launch_input import LaunchInput
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.route import Route

ENTRY = EngineEntry("support.probe_engine", rules="support.probe_engine.rules", image="pull")
REPO = "probe/Checkpoint"


class Probe(CheckpointDefaults):
    """probe-server: one process, one GPU or none, its checkpoint folder opened whole (the rest: CheckpointDefaults)."""

    name = "probe"
    server = "probe-server"
    answers_any_name = False
    readiness = Readiness("/health", while_loading="refused", startup_s=30.0)
    series = ServerSeries.openai("probe:", "requests_running", "requests_waiting")
    reasoning_field = "reasoning"
    tune_knobs = TuneKnobs("serve", ())
    native_route = None  # its own route (`route_candidates`), no native checkpoint

    def owned_flags(self, threads: int, load_mode: str = "none") -> tuple[str, ...]:
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
