"""Which ways of serving Kimi-K3 this host can take, and why not the others (issue 25 §4; seed 001's advice,
"choose the engine by your hardware", made from host facts).

A route is an engine with a model form and a placement (model/route.py). Each registered engine judges its own
(`ServingEngine.routes`: llama.cpp a GGUF quant of unsloth/Kimi-K3-GGUF all-VRAM, hybrid VRAM+RAM or CPU; vLLM
and SGLang the native checkpoint moonshotai/Kimi-K3 on TP8, TP8/DCP8), in the registry's order, and Ollama is
named, never offered. Each is judged from the GPUs (kind, count, VRAM), the RAM and the driver, with the numbers,
and carries the speeds the seeds measured where they exist (only seed 000's 8x RTX PRO 6000 numbers: no seed
measured vLLM or SGLang). Pure: facts in, a `RouteReport` out; `kimik3 routes` and the plan (`Plan.routes`)
render it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.engines.llamacpp.vram_fit import requested_gpus
from kimik3_reconciler.model.engine_names import ENGINES, NOT_ENGINES
from kimik3_reconciler.model.facts import GpuFact, HostFacts, Observed
from kimik3_reconciler.model.humanize import gib
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.route import Route, is_kind

__all__ = ["HostSummary", "Route", "RouteReport", "is_kind", "profile_routes", "routes"]

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

    @property
    def feasible(self) -> tuple[Route, ...]:
        return tuple(r for r in self.routes if r.feasible)

    def lines(self) -> list[str]:
        return [self.host.line(), *(r.line() for r in self.routes), *(f"note: {n}" for n in self.notes)]

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
        return {"host": asdict(self.host), "routes": [asdict(r) for r in self.routes], "notes": list(self.notes)}


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


def routes(
    host: HostFacts,
    gpus: tuple[GpuFact, ...] | None = None,
    source: str = "observed",
    profile: Profile | None = None,
    observed: Observed | None = None,
) -> RouteReport:
    """Every registered engine's routes on `host`, judged on `gpus` (default: all the host's; a profile's GPU
    selection otherwise). `profile`: its engine marks its route, and judges the profile's own model where it is none
    of its Kimi-K3 routes (sized from its files where `observed` lists them)."""
    if gpus is None:
        gpus = host.gpus if host.gpu_probe != "no-driver" else ()
    found: list[Route] = []
    own: list[Route] = []
    for name in ENGINES:
        offered = engine_for(name).routes(
            host, gpus, profile if profile is not None and profile.engine == name else None, observed
        )
        found += offered.kimi
        own += offered.own
    found.append(Route("ollama", "hf.co/unsloth/Kimi-K3-GGUF:<quant>", "-", False, OLLAMA_WHY))
    notes = NOTES
    if not any(r.feasible for r in found):
        notes += (
            "no route serves Kimi-K3 here: what runs on this host is the demo (profiles/demo-cpu.yaml: a tiny "
            "random kimi-k3 GGUF, the same steps) or a hosted API (seed 001)",
        )
    return RouteReport(summarize_host(host, gpus, source), (*own, *found), notes)


def profile_routes(
    profile: Profile | None, host: HostFacts, source: str = "observed", observed: Observed | None = None
) -> RouteReport:
    """The routes on `host`; with a profile, judged on its GPUs and with its own route marked (its model sized from
    its files when `observed` knows them, else from the engine's catalog)."""
    if profile is None:
        return routes(host, source=source)
    gpus = () if profile.gpus == "none" or host.gpu_probe == "no-driver" else requested_gpus(profile, host)[0]
    return routes(host, gpus, source, profile, observed)
