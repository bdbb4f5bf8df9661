"""llama.cpp's routes: each GGUF quant of the catalog (unsloth/Kimi-K3-GGUF) all-VRAM, hybrid VRAM+RAM or on the
CPU only, and the profile's own GGUF where it is none of them, judged with the host gate's arithmetic
(vram_fit.py, memory_gate.py) on the quant's size: all-VRAM when the quant fits the GPUs' memory less CUDA
contexts and its all-VRAM margin; hybrid when quant + 10 % fits VRAM + RAM and what stays in RAM (+ 10 %) fits
the RAM."""

from __future__ import annotations

from dataclasses import asdict

from kimik3_reconciler.engines.base import EngineRoutes
from kimik3_reconciler.engines.llamacpp.host_compat import driver_floor
from kimik3_reconciler.engines.llamacpp.memory_gate import RUNTIME_HEADROOM
from kimik3_reconciler.engines.llamacpp.vram_fit import CUDA_CONTEXT_BYTES, MIB, quant_bytes
from kimik3_reconciler.model import catalog
from kimik3_reconciler.model.driver import driver_at_least, driver_text
from kimik3_reconciler.model.facts import GpuFact, HostFacts, Observed
from kimik3_reconciler.model.humanize import gib
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.route import Route

GGUF_REPO = "unsloth/Kimi-K3-GGUF"

# Seed 000 step 2, measured on 8x RTX PRO 6000 (2026-09-05); the only serving speeds the seeds give.
SEED_SPEEDS: dict[str, str] = {
    "UD-Q2_K_XL": "5.8 tok/s c1 (TTFT 4.6 s), 16.0 tok/s aggregate c8 at -ub 4096",
    "UD-IQ2_XXS": "13.9 tok/s c1, ~25 tok/s aggregate c4-c8",
    "UD-Q2_K_XL-REAP770": "~86 ms/token at 8 slots, 17.9 tok/s aggregate c16, TTFT 3.6 s c1",
}
SPEED_SOURCE = "seed 000 step 2 on 8x RTX PRO 6000"

# kimik3's default base images are CUDA 13.0 (build.base_images): the driver floor of a GGUF route on GPUs.
GGUF_CUDA = (13, 0, 0)


def gguf_routes(
    host: HostFacts, gpus: tuple[GpuFact, ...], profile: Profile | None, observed: Observed | None
) -> EngineRoutes:
    """Every quant of the catalog on these GPUs; with a llama.cpp profile, its quant marked (sized from its files
    when `observed` knows them), and its GGUF judged on its own where it is not one of the catalog's (another repo,
    another quant)."""
    repo, quant = (profile.model.repo, profile.model.quant) if profile is not None else ("", "")
    size = quant_bytes(profile, observed)[0] if profile is not None and observed is not None else None
    catalogued = profile is not None and repo == GGUF_REPO and catalog.lookup(quant) is not None
    found: list[Route] = []
    for info in catalog.CATALOG.values():
        info_size = size if catalogued and info.name == quant and size else info.size_bytes
        if info.refused:
            found.append(Route("llamacpp", f"{GGUF_REPO}:{info.name}", "-", False, f"refused: {info.refused}"))
        elif info_size is not None:
            found.append(gguf_route(info.name, info_size, gpus, host))
    own: tuple[Route, ...] = ()
    if profile is not None and not catalogued:
        model = f"{repo}:{quant}"
        if size:
            ours = gguf_route(quant, size, gpus, host, " (its files)")
            own = (Route(**{**asdict(ours), "model": model, "speed": None}),)
        else:
            why = "its size is not known until the hub lists its files (not a quant of the catalog)"
            own = (Route("llamacpp", model, "-", False, why),)
    if profile is None:
        return EngineRoutes(tuple(found), own)
    model = f"{repo}:{quant}"
    return EngineRoutes(*(tuple(_marked(r, model) for r in routes) for routes in (found, own)))


def _marked(route: Route, model: str) -> Route:
    return Route(**{**asdict(route), "profile": True}) if route.model == model else route


def gguf_route(quant: str, size: int, gpus: tuple[GpuFact, ...], host: HostFacts, why_size: str = "") -> Route:
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
    if not driver_at_least(host.driver_version, floor):
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
