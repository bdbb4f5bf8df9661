"""Which ways of serving Kimi-K3 this host can take, and why not the others (issue 25 §4; seed 001's advice,
"choose the engine by your hardware", made from host facts).

A route is an engine with a model form and a placement: a GGUF quant of unsloth/Kimi-K3-GGUF on llama.cpp
(all-VRAM, hybrid VRAM+RAM, or CPU only), the native checkpoint moonshotai/Kimi-K3 on vLLM (TP8) or SGLang
(TP8/DCP8), and Ollama (named, never offered). Each is judged from the GPUs (kind, count, VRAM), the RAM and
the driver, with the numbers, and carries the speeds the seeds measured where they exist (only seed 000's
8x RTX PRO 6000 numbers: no seed measured vLLM or SGLang). Pure: facts in, a `RouteReport` out; `kimik3
routes` and the plan (`Plan.routes`) render it.

The GGUF arithmetic is the host gate's (engines/llamacpp/vram_fit.py, engines/llamacpp/memory_gate.py) with the catalog's
size: all-VRAM when the quant fits the GPUs' memory less CUDA contexts and its all-VRAM margin; hybrid when
quant + 10 % fits VRAM + RAM and what stays in RAM (+ 10 %) fits the RAM.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from kimik3_reconciler.engines.llamacpp.host_compat import driver_floor, driver_text, version
from kimik3_reconciler.engines.llamacpp.memory_gate import RUNTIME_HEADROOM
from kimik3_reconciler.engines.llamacpp.vram_fit import CUDA_CONTEXT_BYTES, MIB, quant_bytes, requested_gpus
from kimik3_reconciler.model import catalog
from kimik3_reconciler.model.engine_names import NOT_ENGINES
from kimik3_reconciler.model.facts import GpuFact, HostFacts, Observed
from kimik3_reconciler.model.humanize import gib
from kimik3_reconciler.model.profile import Profile

GGUF_REPO = "unsloth/Kimi-K3-GGUF"
NATIVE_REPO = "moonshotai/Kimi-K3"

# Seed 000 step 2, measured on 8x RTX PRO 6000 (2026-09-05); the only serving speeds the seeds give.
SEED_SPEEDS: dict[str, str] = {
    "UD-Q2_K_XL": "5.8 tok/s c1 (TTFT 4.6 s), 16.0 tok/s aggregate c8 at -ub 4096",
    "UD-IQ2_XXS": "13.9 tok/s c1, ~25 tok/s aggregate c4-c8",
    "UD-Q2_K_XL-REAP770": "~86 ms/token at 8 slots, 17.9 tok/s aggregate c16, TTFT 3.6 s c1",
}
SPEED_SOURCE = "seed 000 step 2 on 8x RTX PRO 6000"

# Seed 001: "NVIDIA: minst 8x GB300" (the vLLM recipe; the day-0 guide ran 8x B300) and "R580+ for the current
# CUDA 13 K3 image". Seed 001's AMD kinds (MI355X, MI350X) need ROCm images kimik3 does not deploy.
NATIVE_GPUS = 8
VLLM_KINDS = ("GB300", "B300")
# Seed 001: the SGLang cookbook's verified single-node profile is 8x B300 TP8/DCP8; "do not copy this B300
# topology to H100/H200, GB200/GB300, AMD or multi-node deployments". Its driver floor is the vLLM image's R580
# (the seed gives none for SGLang: engines/sglang/launch.py holds it to the same).
SGLANG_KINDS = ("B300",)
NATIVE_DRIVER = (580,)
# Seed 001: 2.8T parameters; seed 000: SGLang/vLLM serve "the native MXFP4 checkpoint" (4-bit elements and an
# 8-bit scale per 32: 4.25 bits). A lower bound of its bytes (layers kept in higher precision only add): no seed
# gives the checkpoint's size, and a host below this bound cannot hold it whatever the engine.
NATIVE_PARAMETERS = 2_800_000_000_000
NATIVE_MIN_BYTES = NATIVE_PARAMETERS * 425 // 800

# kimik3's default base images are CUDA 13.0 (build.base_images): the driver floor of a GGUF route on GPUs.
GGUF_CUDA = (13, 0, 0)

OLLAMA_WHY = f"engine: ollama {NOT_ENGINES['ollama']}"

NOTES = (
    "layer-wise weight streaming (vLLM/SGLang --cpu-offload-gb) is not offered: PCIe-bound decode, unusable at "
    "this model's ~800 GB of experts (seed 000)",
    "SGLang's KTransformers backend (expert-granular GPU/CPU split) has no Kimi-K3 support as of 2026-09 "
    "(seed 000: kvcache-ai/ktransformers#2109)",
)


@dataclass(frozen=True)
class Route:
    """One way to serve Kimi-K3, judged on one host."""

    engine: str  # llamacpp, vllm, sglang, ollama (model/engine_names.py's names, ollama aside)
    model: str  # repo[:quant]
    placement: str  # all-vram, hybrid, cpu, tp8, tp8-dcp8, -
    feasible: bool
    why: str  # the numbers it was judged on
    speed: str | None = None  # the seed's measured speed, with its source
    profile: bool = False  # the route the given profile takes

    def line(self) -> str:
        mark = "yes" if self.feasible else "no "
        ours = " (this profile)" if self.profile else ""
        speed = f"; measured: {self.speed}" if self.speed else ""
        return f"{mark} {self.engine:<8} {self.model} {self.placement}{ours}: {self.why}{speed}"


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
        feasible = [
            f"{r.engine} {r.model.rpartition(':')[2] if r.engine == 'llamacpp' else r.placement}"
            for r in self.feasible
            if not r.profile
        ]
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
        others = [
            f"{r.engine} {r.model.rpartition(':')[2] if r.engine == 'llamacpp' else r.model} {r.placement}"
            for r in self.feasible
        ]
        return (
            f"routes this host can take instead: {', '.join(others) or 'none of Kimi-K3'} (`kimik3 routes FILE` "
            "says why not the others)"
        )

    def to_json(self) -> dict[str, Any]:
        return {"host": asdict(self.host), "routes": [asdict(r) for r in self.routes], "notes": list(self.notes)}


def is_kind(name: str, kinds: tuple[str, ...]) -> bool:
    """A GPU's NVML name is one of `kinds`. Names read "NVIDIA B300 SXM6 AC", "NVIDIA GB300": a kind matches as a
    word, so B300 is not GB300 (the SGLang cookbook's B300 profile must not run on GB300: seed 001)."""
    return any(re.search(rf"(?<![A-Za-z0-9]){re.escape(kind)}(?![0-9])", name) for kind in kinds)


def _kind(gpu: GpuFact, kinds: tuple[str, ...]) -> bool:
    return is_kind(gpu.name, kinds)


def _driver_ok(driver: str | None, floor: tuple[int, ...]) -> bool:
    return driver is not None and version(driver) >= floor


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


def _gguf_route(quant: str, size: int, gpus: tuple[GpuFact, ...], host: HostFacts, why_size: str = "") -> Route:
    """One quant on llama.cpp: all-VRAM, hybrid or CPU only, as the host gate would judge it."""
    model = f"{GGUF_REPO}:{quant}"
    # The seed's numbers are of one host and one mode: said with both, never as this host's speed.
    speed = f"{SEED_SPEEDS[quant]} ({catalog.quant_mode(quant)}, {SPEED_SOURCE})" if quant in SEED_SPEEDS else None
    ram = host.ram_total or 0
    with_room = int(size * (1 + RUNTIME_HEADROOM))
    sized = f"{gib(size)}{why_size}"
    if not gpus:
        placement = "cpu"
        if with_room <= ram:
            return Route(
                "llamacpp",
                model,
                placement,
                True,
                f"{sized} + 10 % fits the RAM ({gib(ram)}); no GPU: "
                "no seed measured a CPU-only Kimi-K3 (seed 001: expect it to be slow)",
            )
        return Route(
            "llamacpp",
            model,
            placement,
            False,
            f"{sized} + 10 % = {gib(with_room)} > RAM {gib(ram)} (no GPU to hold any of it)",
        )
    floor, _ = driver_floor(GGUF_CUDA)
    if not _driver_ok(host.driver_version, floor):
        return Route(
            "llamacpp",
            model,
            "-",
            False,
            f"driver {host.driver_version or 'none'} is below "
            f"{driver_text(floor)}, the floor of kimik3's CUDA 13.0 base images",
            speed,
        )
    all_vram = catalog.fit_margin(quant, "all-vram").default
    usable = sum(g.memory_total - CUDA_CONTEXT_BYTES - all_vram * MIB for g in gpus)
    vram = sum(g.memory_total for g in gpus)
    if size <= usable:
        return Route(
            "llamacpp",
            model,
            "all-vram",
            True,
            f"{sized} fits the {gib(usable)} usable on {len(gpus)} "
            f"GPU(s) ({gib(vram)} less CUDA contexts and --fit-target {all_vram} MiB each)",
            speed,
        )
    hybrid = catalog.fit_margin(quant, "hybrid").default
    usable = sum(g.memory_total - CUDA_CONTEXT_BYTES - hybrid * MIB for g in gpus)
    in_ram = int((size - usable) * (1 + RUNTIME_HEADROOM))
    if with_room > vram + ram:
        return Route(
            "llamacpp",
            model,
            "hybrid",
            False,
            f"{sized} + 10 % = {gib(with_room)} > VRAM + RAM {gib(vram + ram)}",
            speed,
        )
    if in_ram > ram:
        return Route(
            "llamacpp",
            model,
            "hybrid",
            False,
            f"{sized} is more than the {gib(usable)} usable on "
            f"{len(gpus)} GPU(s); the ~{gib(size - usable)} of experts left for RAM + 10 % > RAM {gib(ram)}",
            speed,
        )
    return Route(
        "llamacpp",
        model,
        "hybrid",
        True,
        f"{sized} is more than the {gib(usable)} usable on {len(gpus)} "
        f"GPU(s): at least ~{gib(size - usable)} of experts in RAM ({gib(ram)}); seed 000: the hybrid decodes "
        "~2x slower than all-VRAM",
        speed,
    )


def _native_route(
    engine: str,
    placement: str,
    kinds: tuple[str, ...],
    gpus: tuple[GpuFact, ...],
    host: HostFacts,
    driver_floor_: tuple[int, ...] | None,
    recipe: str,
) -> Route:
    listed = tuple(g for g in gpus if _kind(g, kinds))
    vram = sum(g.memory_total for g in listed[:NATIVE_GPUS])
    wanted = " or ".join(kinds)
    problems = []
    if len(listed) < NATIVE_GPUS:
        others = sorted({g.name for g in gpus if g not in listed})
        problems.append(
            f"{len(listed)} GPU(s) of the kinds {recipe} lists ({wanted}), {NATIVE_GPUS} needed"
            + (f" ({', '.join(others)}: not a listed kind)" if others else "")
        )
    if len(listed) >= NATIVE_GPUS and vram < NATIVE_MIN_BYTES:
        problems.append(
            f"their VRAM {gib(vram)} < {gib(NATIVE_MIN_BYTES)}, the native checkpoint's lower bound "
            "(2.8T parameters at MXFP4's 4.25 bits)"
        )
    if driver_floor_ is not None and not _driver_ok(host.driver_version, driver_floor_):
        problems.append(
            f"driver {host.driver_version or 'none'} below R{driver_floor_[0]} (seed 001: the CUDA 13 K3 image)"
        )
    if problems:
        return Route(engine, NATIVE_REPO, placement, False, "; ".join(problems))
    floor_note = "" if driver_floor_ is None else f", driver {host.driver_version} >= R{driver_floor_[0]}"
    names = ", ".join(sorted({g.name for g in listed[:NATIVE_GPUS]}))
    return Route(
        engine,
        NATIVE_REPO,
        placement,
        True,
        f"{NATIVE_GPUS}x {names} ({gib(vram)}){floor_note}: {recipe}; no seed measured its speed",
    )


def routes(
    host: HostFacts,
    gpus: tuple[GpuFact, ...] | None = None,
    source: str = "observed",
    profile_route: tuple[str, str, str] | None = None,
    profile_quant_bytes: int | None = None,
) -> RouteReport:
    """Every route on `host`, judged on `gpus` (default: all the host's; a profile's GPU selection otherwise).
    `profile_route`: (engine, repo, quant) of a profile, marked as its route; a GGUF that is not one of the
    catalog's (another repo, another quant) is judged on `profile_quant_bytes` (its files) and added."""
    if gpus is None:
        gpus = host.gpus if host.gpu_probe != "no-driver" else ()
    engine, repo, quant = profile_route or ("", "", "")
    catalogued = engine == "llamacpp" and repo == GGUF_REPO and catalog.lookup(quant) is not None
    found: list[Route] = []
    for info in catalog.CATALOG.values():
        size = profile_quant_bytes if catalogued and info.name == quant and profile_quant_bytes else info.size_bytes
        if info.refused:
            found.append(Route("llamacpp", f"{GGUF_REPO}:{info.name}", "-", False, f"refused: {info.refused}"))
        elif size is not None:
            found.append(_gguf_route(info.name, size, gpus, host))
    found.append(
        _native_route(
            "vllm",
            "tp8",
            VLLM_KINDS,
            gpus,
            host,
            NATIVE_DRIVER,
            "seed 001's vLLM recipe (TP8, fp8 KV cache, vllm/vllm-openai:kimi-k3)",
        )
    )
    found.append(
        _native_route(
            "sglang",
            "tp8-dcp8",
            SGLANG_KINDS,
            gpus,
            host,
            NATIVE_DRIVER,
            "seed 001's SGLang cookbook profile (TP8/DCP8, verified on 8x B300; needs "
            "sglang.mamba_full_memory_ratio from the cookbook's calculator)",
        )
    )
    found.append(Route("ollama", f"hf.co/{GGUF_REPO}:<quant>", "-", False, OLLAMA_WHY))
    notes = NOTES
    if not any(r.feasible for r in found):
        notes += (
            "no route serves Kimi-K3 here: what runs on this host is the demo (profiles/demo-cpu.yaml: a tiny "
            "random kimi-k3 GGUF, the same steps) or a hosted API (seed 001)",
        )
    if engine == "llamacpp" and not catalogued:
        model = f"{repo}:{quant}"
        if profile_quant_bytes:
            ours = _gguf_route(quant, profile_quant_bytes, gpus, host, " (its files)")
            found.insert(0, Route(**{**asdict(ours), "model": model, "speed": None}))
        else:
            found.insert(
                0,
                Route(
                    "llamacpp",
                    model,
                    "-",
                    False,
                    "its size is not known until the hub lists its files (not a quant of the catalog)",
                ),
            )
    if profile_route is not None:
        found = [_mark(r, engine, f"{repo}:{quant}") for r in found]
    return RouteReport(summarize_host(host, gpus, source), tuple(found), notes)


def _mark(route: Route, engine: str, model: str) -> Route:
    ours = route.engine == engine and (engine != "llamacpp" or route.model == model)
    return Route(**{**asdict(route), "profile": True}) if ours else route


def profile_routes(
    profile: Profile | None, host: HostFacts, source: str = "observed", observed: Observed | None = None
) -> RouteReport:
    """The routes on `host`; with a profile, judged on its GPUs and with its own route marked (its quant sized from
    its files when `observed` knows them, else from the catalog)."""
    if profile is None:
        return routes(host, source=source)
    engine = getattr(profile, "engine", "llamacpp")
    gpus = () if profile.gpus == "none" or host.gpu_probe == "no-driver" else requested_gpus(profile, host)[0]
    quant = profile.model.quant if engine == "llamacpp" else ""
    size = quant_bytes(profile, observed)[0] if engine == "llamacpp" and observed is not None else None
    return routes(host, gpus, source, (engine, profile.model.repo, quant), size)
