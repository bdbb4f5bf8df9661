"""Which ways of serving Kimi-K3 this host can take, and why not the others (issue 25 §4; seed 001's advice,
"choose the engine by your hardware", made from host facts).

A route is an engine with a model form and a placement: a GGUF quant of unsloth/Kimi-K3-GGUF on llama.cpp
(all-VRAM, hybrid VRAM+RAM, or CPU only), the native checkpoint moonshotai/Kimi-K3 on vLLM (TP8) or SGLang
(TP8/DCP8), and Ollama (named, never offered). Each is a profile (the user's, or ROUTES_BASE, with the route's
quant or engine swapped in) judged by the plan's own host gate (planning/host_gate.py) on the host's facts at the
route's size (a quant's, or the checkpoint's lower bound): feasible exactly when `kimik3 plan` would pass it, with
the gate's words when not. The profile's own route is the profile itself, and in a plan it takes the plan's gate
verdict. Routes carry the speeds the seeds measured where they exist (only seed 000's 8x RTX PRO 6000 numbers: no
seed measured vLLM or SGLang), and name one to start with in seed 001's order (RANK). Pure: facts in, a
`RouteReport` out; `kimik3 routes` and the plan (`Plan.routes`, planning/engine_plan.py) render it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.engines.base import EnginePlan
from kimik3_reconciler.engines.gpus import requested_gpus
from kimik3_reconciler.engines.llamacpp.host_compat import arch_name
from kimik3_reconciler.engines.llamacpp.routes import GGUF_REPO, SEED_SPEEDS, SPEED_SOURCE
from kimik3_reconciler.engines.llamacpp.vram_fit import CUDA_CONTEXT_BYTES, MIB, quant_bytes
from kimik3_reconciler.engines.native_route import NATIVE_MIN_BYTES, NATIVE_REPO
from kimik3_reconciler.errors import FieldRefusal
from kimik3_reconciler.model import catalog
from kimik3_reconciler.model.engine_names import ENGINES, NOT_ENGINES
from kimik3_reconciler.model.facts import GpuFact, HostFacts, LocalInputs, ModelFact, Observed, RemoteFile
from kimik3_reconciler.model.humanize import gib
from kimik3_reconciler.model.model_files import CHECKPOINT
from kimik3_reconciler.model.profile import SECTIONS, Profile
from kimik3_reconciler.model.route import Route, is_kind
from kimik3_reconciler.planning.host_gate import host_gate

__all__ = ["HostSummary", "Route", "RouteReport", "is_kind", "profile_routes", "routes"]

# The engines' own needs (kinds, count, driver, memory share) are theirs: engine.host_needs, read by the gate.

# What `kimik3 routes` without a profile judges the routes as: a llama.cpp profile with every default (the CUDA
# build for this host's GPUs, the CPU build without them), the quant and engine of each route swapped in. The
# revision is a placeholder: routes judge GPUs, memory and driver, never fetch.
ROUTES_BASE = f"""apiVersion: kimik3/v1
name: routes
model: {{repo: {GGUF_REPO}, revision: "{"0" * 40}", quant: UD-Q2_K_XL}}
"""

OLLAMA_WHY = f"engine: ollama {NOT_ENGINES['ollama']}"

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


def _nvidia(gpu: GpuFact) -> bool:
    """A GPU kimik3's images can use: an NVML one (an observed host lists no other), or a described one that is
    NVIDIA's (a described host may name AMD's MI355X, which NVML never sees)."""
    return not gpu.uuid.startswith("described-") or "nvidia" in gpu.name.lower()


def route_observation(profile: Profile, host: HostFacts, size: int | None, start: Observed | None = None) -> Observed:
    """What the plan's gate is given to judge a route on a host: the host's facts (without its listeners: a port
    is the deployment's choice, not the route's) and the route's weights as one file of `size` bytes (a quant's
    size, or the checkpoint's lower bound), so that the gate's sizing reads the numbers the route is judged on.
    `start`: an observation made here for another route of the same host (copied: a route costs no conversion)."""
    gguf = engine_for(profile.engine).model_source.format == "gguf"
    name = f"{profile.model.quant}/route.gguf" if gguf else "route.safetensors"
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


def _gpus_of(profile: Profile, host: HostFacts) -> tuple[GpuFact, ...]:
    if profile.gpus == "none" or host.gpu_probe == "no-driver":
        return ()
    return requested_gpus(profile, host)[0]


def _gguf_profile(base: Profile, quant: str, host: HostFacts, adapt: bool) -> Profile:
    """Catalog quant `quant` on llama.cpp, as `base` would run it: a llama.cpp profile keeps its build and GPUs,
    another engine's (or the CLI's default: `adapt`) gets the CUDA build for this host's GPUs (the CPU build without them);
    the quant's own sizing (fit_target, ubatch, batch, split: the catalog's defaults for it) and host.prepare on
    (kimik3 sets numa_balancing itself)."""
    if not adapt and base.engine == "llamacpp" and base.model.repo == GGUF_REPO and base.model.quant == quant:
        return base
    update: dict[str, Any] = {
        "engine": "llamacpp",
        "model": base.model.model_copy(update={"repo": GGUF_REPO, "quant": quant, "local_path": None}),
        "serve": base.serve.model_copy(
            update={"fit_target": None, "n_cpu_moe": None, "ubatch": None, "batch": None, "spec_draft": None}
        ),
        "host": base.host.model_copy(update={"prepare": True}),
    }
    if adapt or base.engine != "llamacpp":
        gpus = tuple(g for g in host.gpus if _nvidia(g)) if host.gpu_probe == "ok" else ()
        build = {"variant": "cuda" if gpus else "cpu", "cpu_features": "auto"}
        update |= {"build": base.build.model_copy(update=build), "gpus": "all" if gpus else "none"}
    else:
        gpus = _gpus_of(base, host)
    # The image is built for these GPUs (a build setting, not the hardware): build.cuda_architectures as they need.
    archs = sorted({arch_name(g.compute_capability) for g in gpus if g.compute_capability != (0, 0)})
    if archs:
        build = update.get("build", base.build)
        update["build"] = build.model_copy(update={"cuda_architectures": archs})
    return base.model_copy(update=update)


def _gguf_route(
    profile: Profile,
    host: HostFacts,
    size: int,
    why_size: str = "",
    start: Observed | None = None,
    plan: tuple[Observed, list[str] | None, EnginePlan | None] | None = None,
) -> Route:
    """One quant on llama.cpp: feasible exactly when the plan's gate passes it here; the numbers either way."""
    quant = profile.model.quant
    model = f"{profile.model.repo}:{quant}"
    # The seed's numbers are of one host and one mode: said with both, never as this host's speed.
    speed = f"{SEED_SPEEDS[quant]} ({catalog.quant_mode(quant)}, {SPEED_SOURCE})" if quant in SEED_SPEEDS else None
    gpus = _gpus_of(profile, host)
    if profile.build.variant == "cuda" and any(not _nvidia(g) for g in gpus):
        # kimik3 builds llama.cpp's image for CUDA only (Dockerfile.llamacpp, build.variant cuda or cpu).
        names = ", ".join(sorted({g.name for g in gpus if not _nvidia(g)}))
        return Route(
            "llamacpp", model, "-", False, f"{names}: kimik3 builds llama.cpp's image for NVIDIA (CUDA) only", speed
        )
    facts, refusals, rendered = plan or (route_observation(profile, host, size, start), None, None)
    # The route's plan, once (the profile's own: the plan's): the gate and the mode read it.
    rendered = rendered if rendered is not None else engine_for(profile.engine).render_plan(profile, facts)
    refusals = gate_refusals(profile, facts, rendered) if refusals is None else refusals
    decision = rendered.mode
    placement = "cpu" if not gpus or profile.build.variant == "cpu" else decision.mode
    sized = f"{gib(size)}{why_size}"
    if refusals:
        return Route("llamacpp", model, placement, False, "; ".join(refusals), speed)
    ram = host.ram_total or 0
    if placement == "cpu":
        others = sorted({g.name for g in host.gpus if not _nvidia(g)})
        # kimik3 builds llama.cpp's image for CUDA or the CPU only: another vendor's GPUs hold none of it.
        unused = f" ({', '.join(others)}: kimik3 builds llama.cpp for CUDA only)" if others else ""
        why = (
            f"{sized} + 10 % fits the RAM ({gib(ram)}); no GPU{unused}: no seed measured a CPU-only Kimi-K3 "
            "(seed 001: expect it to be slow)"
        )
        return Route("llamacpp", model, placement, True, why)
    vram = sum(g.memory_total for g in gpus)
    if placement == "all-vram":
        margin = catalog.fit_margin(quant, "all-vram").default
        usable = sum(g.memory_total - CUDA_CONTEXT_BYTES - margin * MIB for g in gpus)
        why = (
            f"{sized} fits the {gib(usable)} usable on {len(gpus)} GPU(s) ({gib(vram)} less CUDA contexts and "
            f"--fit-target {margin} MiB each)"
        )
        return Route("llamacpp", model, placement, True, why, speed)
    in_ram = decision.cpu_bytes or 0
    measured = f" (seed 000 measured it: {decision.floor})" if decision.floor else ""
    why = (
        f"{sized} is more than the {gib(decision.usable_bytes)} usable on {len(gpus)} GPU(s): at least "
        f"~{gib(in_ram)} of experts in RAM ({gib(ram)}){measured}; seed 000: the hybrid decodes ~2x slower than "
        "all-VRAM"
    )
    return Route("llamacpp", model, placement, True, why, speed)


def _native_profile(base: Profile, engine: str) -> Profile:
    """The native checkpoint on `engine`, as `base` would run it: a profile of that engine is itself; another's
    takes the recipe's knobs (the engine's `native_route`) on all the host's GPUs."""
    if base.engine == engine:
        return base
    knobs = SECTIONS[f"{engine.capitalize()}Spec"](**engine_for(engine).native_route.knobs)
    model = base.model.model_copy(
        update={"repo": NATIVE_REPO, "quant": CHECKPOINT, "local_path": None, "revision": "lower bound"}
    )
    return base.model_copy(update={"engine": engine, engine: knobs, "model": model, "gpus": "all"})


def _native_route(
    profile: Profile,
    host: HostFacts,
    start: Observed | None = None,
    plan: tuple[Observed, list[str] | None, EnginePlan | None] | None = None,
) -> Route:
    """The native checkpoint on vLLM or SGLang, judged by the plan's gate at the checkpoint's lower bound."""
    engine, native = profile.engine, engine_for(profile.engine).native_route
    needs = engine_for(engine).host_needs(profile)
    section = getattr(profile, engine)  # the engine's own section (vllm: may be left out, its defaults)
    placement = native.placement.format(gpus=needs.gpus, **(section.model_dump() if section is not None else {}))
    facts, refusals, rendered = plan or (route_observation(profile, host, NATIVE_MIN_BYTES, start), None, None)
    refusals = gate_refusals(profile, facts, rendered) if refusals is None else refusals
    others = sorted({g.name for g in _gpus_of(profile, host) if not _nvidia(g)})
    if others:
        # Seed 001's AMD route (MI355X, MI350X) takes the ROCm image; kimik3 pulls the CUDA one, and any_gpu does not
        # change that (NVML never sees these GPUs on a real host).
        refusals = [f"{', '.join(others)}: seed 001's AMD route needs the ROCm image, which kimik3 does not deploy"]
    if refusals:
        bound = " (its weights counted at the lower bound: 2.8T parameters at MXFP4's 4.25 bits)"
        lower = any("checkpoint's weights" in r for r in refusals)
        return Route(engine, profile.model.repo, placement, False, "; ".join(refusals) + (bound if lower else ""))
    used = _gpus_of(profile, host)[: needs.gpus]
    names = ", ".join(sorted({g.name for g in used}))
    floor = f", driver {host.driver_version} >= R{needs.min_driver[0]}"
    return Route(
        engine,
        profile.model.repo,
        placement,
        True,
        f"{len(used)}x {names} ({gib(sum(g.memory_total for g in used))}){floor}: {native.recipe}; no seed "
        "measured its speed",
    )


# Seed 001, "vLLM vs SGLang vs llama.cpp": on an 8-GPU Blackwell-class server start with vLLM (SGLang for lower-level
# serving control); GGUF on llama.cpp proves K3 runs on the hardware one owns. Seed 000: all-VRAM decodes ~2x
# faster than the hybrid; the CPU build is the last resort.
RANK = ("vllm", "sglang", "all-vram", "hybrid", "cpu")
RANK_WHY = {
    "vllm": "seed 001: on an 8-GPU Blackwell-class server, start with vLLM",
    "sglang": "seed 001: SGLang for lower-level serving control (vLLM is not feasible here)",
    "all-vram": "seed 001: no native route fits here; GGUF on llama.cpp, all-VRAM (seed 000: ~2x the hybrid)",
    "hybrid": "seed 001: no native route fits here; GGUF on llama.cpp, hybrid VRAM + RAM",
    "cpu": "seed 001: no GPU route here; the CPU build (expect it to be slow)",
}


def recommend(found: tuple[Route, ...]) -> tuple[Route, str] | None:
    """The route to start with, and why: the first feasible of seed 001's order (RANK); within a placement, the
    catalog's order (seed 000's measured quants first)."""
    feasible = [r for r in found if r.feasible and r.engine != "ollama"]
    if not feasible:
        return None

    def kind(route: Route) -> str:
        return route.engine if route.engine != "llamacpp" else route.placement

    # A placement not known here (a GGUF of another repo before its files are listed) ranks last.
    best = min(feasible, key=lambda r: RANK.index(kind(r)) if kind(r) in RANK else len(RANK))  # ties: listed order
    return best, RANK_WHY.get(kind(best), "the profile's own route: the plan's gate passes it")


def default_base() -> Profile:
    """ROUTES_BASE, validated (pydantic: only `kimik3 routes` without a profile pays for it, never a plan)."""
    from kimik3_reconciler.model.profile_source import parse_profile

    return parse_profile(ROUTES_BASE, "kimik3 routes' default profile").profile


def routes(
    host: HostFacts,
    base: Profile | None = None,
    source: str = "observed",
    profile: Profile | None = None,
    profile_refusals: list[str] | None = None,
    profile_quant_bytes: int | None = None,
    observed: Observed | None = None,
    rendered: EnginePlan | None = None,
) -> RouteReport:
    """Every route on `host`: each a profile made from `base` (model/engine swapped in) and judged by the plan's
    gate. `profile`: the user's, marked as its route; `profile_refusals`: what the plan's gate said of it (the plan
    passes its own, so a route is feasible exactly when the plan is), else the gate is asked here on the host's
    facts. A GGUF that is not one of the catalog's (another repo, another quant) is judged on
    `profile_quant_bytes` (its files) and added. Without `base`, ROUTES_BASE."""
    base = base or default_base()
    start = route_observation(base, host, None)  # the host's facts once: each route copies them

    def ours_plan(route_profile: Profile) -> tuple[Observed, list[str] | None, EnginePlan | None] | None:
        """The profile's own route is the plan's: its observation and, when the plan gave them, its gate's verdict
        and its engine's plan."""
        return (observed, profile_refusals, rendered) if route_profile is profile and observed is not None else None

    adapted = profile is None or base.engine != "llamacpp"  # judged on the host's GPUs, not a profile's choice
    gpus = (host.gpus if host.gpu_probe == "ok" else ()) if adapted else _gpus_of(base, host)
    found: list[Route] = []
    for info in catalog.CATALOG.values():
        if info.refused:
            found.append(Route("llamacpp", f"{GGUF_REPO}:{info.name}", "-", False, f"refused: {info.refused}"))
        elif info.size_bytes is not None:
            ours = profile is not None and _same(profile, "llamacpp", GGUF_REPO, info.name)
            size = profile_quant_bytes if ours and profile_quant_bytes else info.size_bytes
            route_profile = _gguf_profile(base, info.name, host, profile is None)
            found.append(_gguf_route(route_profile, host, size, start=start, plan=ours_plan(route_profile)))
    for engine in (name for name in ENGINES if engine_for(name).native_route is not None):  # vLLM, SGLang
        route_profile = _native_profile(base, engine)
        found.append(_native_route(route_profile, host, start, ours_plan(route_profile)))
    for name in ENGINES:  # what an engine offers beyond the routes judged above (a probe's): none for those three
        offered = engine_for(name).routes(host, gpus, profile if profile and profile.engine == name else None, observed)
        found += (*offered.own, *offered.kimi)
    found.append(Route("ollama", f"hf.co/{GGUF_REPO}:<quant>", "-", False, OLLAMA_WHY))
    notes = NOTES
    if not any(r.feasible for r in found):
        notes += (
            "no route serves Kimi-K3 here: what runs on this host is the demo (profiles/demo-cpu.yaml: a tiny "
            "random kimi-k3 GGUF, the same steps) or a hosted API (seed 001)",
        )
    if profile is not None and profile.engine == "llamacpp" and catalog.lookup(profile.model.quant) is None:
        found.insert(0, _uncatalogued(profile, host, profile_quant_bytes))
    elif profile is not None and profile.model.repo != GGUF_REPO and profile.engine == "llamacpp":
        found.insert(0, _uncatalogued(profile, host, profile_quant_bytes))
    if profile is not None:
        found = [_judged(r, profile, profile_refusals) for r in found]
    return RouteReport(summarize_host(host, gpus, source), tuple(found), notes, recommend(tuple(found)))


def _same(profile: Profile, engine: str, repo: str, quant: str) -> bool:
    return profile.engine == engine and (
        engine != "llamacpp" or (profile.model.repo, profile.model.quant) == (repo, quant)
    )


def _uncatalogued(profile: Profile, host: HostFacts, size: int | None) -> Route:
    model = f"{profile.model.repo}:{profile.model.quant}"
    if not size:
        return Route(
            "llamacpp",
            model,
            "-",
            False,
            "its size is not known until the hub lists its files (not a quant of the catalog)",
        )
    return Route(**{**asdict(_gguf_route(profile, host, size, " (its files)")), "model": model, "speed": None})


def _judged(route: Route, profile: Profile, refusals: list[str] | None) -> Route:
    """The profile's own route, marked; `refusals`: the plan's verdict on it (the plan's gate saw the model's files
    and what runs here), which stands over the route's."""
    repo, _, quant = route.model.rpartition(":") if route.engine == "llamacpp" else (route.model, "", "")
    if route.engine == "ollama" or not _same(profile, route.engine, repo, quant):
        return route
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
    plan's gate (`refusals`: the plan's own verdict, else asked here; its quant sized from its files when
    `observed` knows them, else from the catalog; `rendered`: the engine's plan on `observed`, where the plan has it).
    Without one, `base` (default: ROUTES_BASE) stands in."""
    if profile is None:
        return routes(host, base, source)
    size = quant_bytes(profile, observed)[0] if profile.engine == "llamacpp" and observed is not None else None
    return routes(host, profile, source, profile, refusals, size, observed, rendered)
