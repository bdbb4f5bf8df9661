"""Which ways of serving Kimi-K3 this host can take, and why not the others (issue 25 §4; seed 001's advice,
"choose the engine by your hardware", made from host facts).

A route is an engine with a model form and a placement. Each engine offers its own as candidates
(`ServingEngine.route_candidates`: llama.cpp a GGUF quant of its catalog each, all-VRAM, hybrid or CPU only, where
kimik3 can build its image; vLLM and SGLang the native checkpoint; a profile of the route, made from the user's or
the default engine's `routes_base`), and Ollama is named, never offered (the registry's NOT_ENGINES). Each candidate's profile is judged here by the plan's own host gate
(planning/host_gate.py) with the engine's plan, on the host's facts at the route's size: feasible exactly when
`kimik3 plan` would pass it, with the gate's words when not. The profile's own route is the profile itself, and in a
plan it takes the plan's gate verdict. One route is named to start with, in seed 001's order (each engine's
`route_rank`). Pure: facts in, a `RouteReport` out; `kimik3 routes` and the plan (`Plan.routes`,
planning/engine_plan.py) render it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kimik3_reconciler.engines import ServingEngine, engine_for
from kimik3_reconciler.engines.base import EnginePlan, RouteCandidate
from kimik3_reconciler.engines.gpus import claimed_gpus
from kimik3_reconciler.errors import FieldRefusal
from kimik3_reconciler.model.engine_names import DEFAULT_ENGINE, ENGINES, NOT_ENGINE_ROUTES, NOT_ENGINES
from kimik3_reconciler.model.facts import GpuFact, HostFacts, LocalInputs, ModelFact, Observed, RemoteFile
from kimik3_reconciler.model.humanize import gib
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.route import Route, is_kind
from kimik3_reconciler.planning.host_gate import host_gate

__all__ = ["HostSummary", "Route", "RouteReport", "is_kind", "profile_routes", "routes"]

# The engines' own needs (kinds, count, driver, memory share) are theirs: engine.host_needs, read by the gate.

NOTES = (
    "layer-wise weight streaming (vLLM/SGLang --cpu-offload-gb) is not offered: PCIe-bound decode, unusable at "
    "this model's ~800 GB of experts (seed 000)",
    "SGLang's KTransformers backend (expert-granular GPU/CPU split) has no Kimi-K3 support as of 2026-09 "
    "(seed 000: kvcache-ai/ktransformers#2109)",
)


@dataclass(frozen=True)
class HostSummary:
    """What the routes were judged on."""

    source: str  # "observed" or the described host's file
    gpus: tuple[tuple[str, int, int], ...]  # (name, count, bytes each), grouped by kind
    vram_bytes: int
    ram_bytes: int | None
    driver: str | None

    def line(self) -> str:
        gpus = ", ".join(f"{n}x {name} ({gib(size)})" for name, n, size in self.gpus) or "no GPU"
        ram = gib(self.ram_bytes) if self.ram_bytes else "unknown"
        return f"host ({self.source}): {gpus}; VRAM {gib(self.vram_bytes)}, RAM {ram}, driver {self.driver or 'none'}"


@dataclass(frozen=True)
class RouteReport:
    host: HostSummary
    routes: tuple[Route, ...]
    notes: tuple[str, ...] = field(default=NOTES)
    recommended: tuple[Route, str] | None = None  # the route to start with and why (seed 001's order)

    @property
    def feasible(self) -> tuple[Route, ...]:
        return tuple(r for r in self.routes if r.feasible)

    def lines(self) -> list[str]:
        start = []
        if self.recommended is not None:
            route, why = self.recommended
            start = [f"start with: {route.engine} {route.model} {route.placement} ({why})"]
        return [self.host.line(), *start, *(r.line() for r in self.routes), *(f"note: {n}" for n in self.notes)]

    def summary(self) -> str:
        """One line for the plan: the profile's route and the feasible ones."""
        ours = next((r for r in self.routes if r.profile), None)
        feasible = [f"{r.engine} {r.form or r.placement}" for r in self.feasible if not r.profile]
        head = (
            f"this profile's route ({ours.engine} {ours.placement}) is {'feasible' if ours.feasible else 'NOT feasible'}"
            f" here; "
            if ours
            else ""
        )
        return (
            f"routes: {head}feasible here{' as well' if ours else ''}: {', '.join(feasible) or 'none'} "
            "(`kimik3 routes` says why not the others)"
        )

    def instead(self) -> str | None:
        """For a refusal: when the profile's own route cannot run here, the routes that can (None otherwise)."""
        ours = next((r for r in self.routes if r.profile), None)
        if ours is None or ours.feasible:
            return None
        others = [f"{r.engine} {r.form or r.model} {r.placement}" for r in self.feasible]
        return (
            f"routes this host can take instead: {', '.join(others) or 'none of Kimi-K3'} (`kimik3 routes FILE` "
            "says why not the others)"
        )

    def to_json(self) -> dict[str, Any]:
        start = None
        if self.recommended is not None:
            start = {**asdict(self.recommended[0]), "because": self.recommended[1]}
        return {
            "host": asdict(self.host),
            "recommended": start,
            "routes": [asdict(r) for r in self.routes],
            "notes": list(self.notes),
        }


def summarize_host(host: HostFacts, gpus: tuple[GpuFact, ...], source: str) -> HostSummary:
    groups: dict[tuple[str, int], int] = {}
    for gpu in gpus:
        groups[(gpu.name, gpu.memory_total)] = groups.get((gpu.name, gpu.memory_total), 0) + 1
    return HostSummary(
        source,
        tuple((name, n, size) for (name, size), n in groups.items()),
        sum(g.memory_total for g in gpus),
        host.ram_total,
        host.driver_version,
    )


def route_observation(profile: Profile, host: HostFacts, size: int | None, start: Observed | None = None) -> Observed:
    """What the plan's gate is given to judge a route on a host: the host's facts (without its listeners: a port
    is the deployment's choice, not the route's) and the route's weights as one file of `size` bytes (a quant's
    size, or the checkpoint's lower bound), so that the gate's sizing reads the numbers the route is judged on.
    `start`: an observation made here for another route of the same host (copied: a route costs no conversion)."""
    name = f"{profile.model.quant}/route{engine_for(profile.engine).model_source.suffix}"  # the engine's weight files
    fields = {
        "repo": profile.model.repo,
        "revision": profile.model.revision,
        "quant": profile.model.quant,
        "cache_dir": profile.model.cache_dir,
        "files": (RemoteFile(path=name, size=size),) if size else (),
    }
    if start is not None:
        return start.model_copy(update={"model": start.model.model_copy(update=fields)})
    # A host whose GPUs were not probed (a pure test, a plan made without NVML) has none a route can count on: the
    # gate leaves unobserved GPUs unjudged, routes answer what this host is known to have.
    probed = host.gpu_probe or "no-driver"
    return Observed(
        host=host.model_copy(update={"listeners": (), "gpu_probe": probed}),
        inputs=LocalInputs(dockerfile_path="", dockerfile_sha256=""),
        model=ModelFact(**fields),
    )


def gate_refusals(profile: Profile, facts: Observed, rendered: EnginePlan | None = None) -> list[str]:
    """The plan's host gate (planning/host_gate.py) on a route's observation, with the engine's plan on it: what
    `kimik3 plan` refuses it for. What no profile field can change comes first (a checkpoint larger than the VRAM
    before the GPUs' kind)."""
    refusals, _ = host_gate(profile, facts, rendered)
    return sorted(refusals, key=lambda r: isinstance(r, FieldRefusal))


def recommend(found: tuple[Route, ...]) -> tuple[Route, str] | None:
    """The route to start with, and why: the first feasible of seed 001's order (each engine's `route_rank`: vLLM,
    SGLang, then llama.cpp all-VRAM, hybrid, CPU); of equal rank, the order listed (the catalog's: seed 000's measured
    quants first). A route no engine ranks (a GGUF of another repo before its files are listed) ranks last."""
    feasible = [r for r in found if r.feasible and r.engine in ENGINES]  # ollama is named, never offered
    if not feasible:
        return None
    last = (len(found) + 1, "the profile's own route: the plan's gate passes it")
    ranks = [engine_for(r.engine).route_rank(r) or last for r in feasible]
    best = min(range(len(feasible)), key=lambda i: ranks[i][0])  # ties: listed order
    return feasible[best], ranks[best][1]


def default_base() -> Profile:
    """The default engine's `routes_base`, validated (pydantic: only `kimik3 routes` without a profile pays for it,
    never a plan)."""
    from kimik3_reconciler.model.profile_source import parse_profile

    return parse_profile(engine_for(DEFAULT_ENGINE).routes_base, "kimik3 routes' default profile").profile


def routes(
    host: HostFacts,
    base: Profile | None = None,
    source: str = "observed",
    profile: Profile | None = None,
    profile_refusals: list[str] | None = None,
    observed: Observed | None = None,
    rendered: EnginePlan | None = None,
) -> RouteReport:
    """Every route on `host`: each engine's candidates made from `base` (model/engine swapped in), each judged by the
    plan's gate with the engine's plan on it. `profile`: the user's, marked as its route; `profile_refusals`: what the
    plan's gate said of it (the plan passes its own, so a route is feasible exactly when the plan is), else the gate
    is asked here on the host's facts; `observed`, `rendered`: the plan's observation and the engine's plan on it.
    Without `base`, the default engine's `routes_base`."""
    base = base or default_base()
    start = route_observation(base, host, None)  # the host's facts once: each route copies them
    found: list[Route] = []
    kimi = False  # a route of Kimi-K3 is feasible (the profile's own model aside)
    for name in ENGINES:  # the registry's order: llama.cpp's quants, vLLM's and SGLang's checkpoint, any other
        engine = engine_for(name)
        for candidate in engine.route_candidates(base, host, profile, observed):
            route = _judge(engine, candidate, host, start, profile, (observed, profile_refusals, rendered))
            kimi = kimi or (candidate.kimi and route.feasible)
            found.append(_judged(route, profile_refusals) if candidate.ours else route)
    # Names kimik3 deliberately does not deploy: shown, never offered (the registry says why).
    found.extend(
        Route(name, NOT_ENGINE_ROUTES[name], "-", False, f"engine: {name} {why}") for name, why in NOT_ENGINES.items()
    )
    notes = NOTES
    if not kimi:
        # The demo is the default engine's profile: its model is in that engine's format (a GGUF).
        demo_format = engine_for(DEFAULT_ENGINE).model_source.format.upper()
        notes += (
            "no route serves Kimi-K3 here: what runs on this host is the demo (profiles/demo-cpu.yaml: a tiny "
            f"random kimi-k3 {demo_format}, the same steps) or a hosted API (seed 001)",
        )
    # What the routes were judged on: the profile's GPUs, or (no profile) the GPUs this host is known to have.
    gpus = claimed_gpus(base, host) if profile is not None else (host.gpus if host.gpu_probe == "ok" else ())
    return RouteReport(summarize_host(host, gpus, source), tuple(found), notes, recommend(tuple(found)))


def _judge(
    engine: ServingEngine,
    candidate: RouteCandidate,
    host: HostFacts,
    start: Observed,
    profile: Profile | None,
    plan: tuple[Observed | None, list[str] | None, EnginePlan | None],
) -> Route:
    """A candidate's route: as the engine decided it, else judged by the plan's gate with the engine's plan, on the
    route's observation (the profile's own route where the plan is: its observation, verdict and engine plan)."""
    if candidate.profile is None or candidate.judge is None:
        assert candidate.route is not None  # decided without the gate
        return candidate.route
    observed, refusals, rendered = plan
    if not (candidate.own_plan and candidate.profile is profile and observed is not None):
        observed, refusals, rendered = route_observation(candidate.profile, host, candidate.size, start), None, None
    rendered = rendered if rendered is not None else engine.render_plan(candidate.profile, observed)  # once a route
    refusals = gate_refusals(candidate.profile, observed, rendered) if refusals is None else refusals
    return candidate.judge(refusals, rendered)


def _judged(route: Route, refusals: list[str] | None) -> Route:
    """The profile's own route, marked; `refusals`: the plan's verdict on it (the plan's gate saw the model's files
    and what runs here), which stands over the route's."""
    if refusals is None:  # judged above on the profile itself, by the same gate
        return Route(**{**asdict(route), "profile": True})
    if refusals:
        return Route(**{**asdict(route), "feasible": False, "why": "; ".join(refusals), "profile": True})
    return Route(**{**asdict(route), "feasible": True, "profile": True})


def profile_routes(
    profile: Profile | None,
    host: HostFacts,
    source: str = "observed",
    observed: Observed | None = None,
    refusals: list[str] | None = None,
    base: Profile | None = None,
    rendered: EnginePlan | None = None,
) -> RouteReport:
    """The routes on `host`; with a profile, judged as it would run them, its own route marked and judged by the
    plan's gate (`refusals`: the plan's own verdict, else asked here; its model sized from its files when
    `observed` knows them, else as the engine lists it; `rendered`: the engine's plan on `observed`, where the plan
    has it). Without one, `base` (default: the default engine's `routes_base`) stands in."""
    if profile is None:
        return routes(host, base, source)
    return routes(host, profile, source, profile, refusals, observed, rendered)
