"""The native checkpoint's route (moonshotai/Kimi-K3 on 8 GPUs of the kinds a recipe lists, seed 001), judged on
one host: shared by the engines that serve it (vLLM's TP8 and SGLang's TP8/DCP8 recipes), each with its kinds,
driver floor and recipe. Pure: host facts in, a Route out."""

from __future__ import annotations

from dataclasses import replace

from kimik3_reconciler.engines.base import EngineRoutes
from kimik3_reconciler.model.driver import driver_at_least
from kimik3_reconciler.model.facts import GpuFact, HostFacts
from kimik3_reconciler.model.humanize import gib
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.route import Route, is_kind

NATIVE_REPO = "moonshotai/Kimi-K3"

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


def native_route(
    engine: str,
    placement: str,
    kinds: tuple[str, ...],
    gpus: tuple[GpuFact, ...],
    host: HostFacts,
    driver_floor_: tuple[int, ...] | None,
    recipe: str,
) -> Route:
    listed = tuple(g for g in gpus if is_kind(g.name, kinds))
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
    if driver_floor_ is not None and not driver_at_least(host.driver_version, driver_floor_):
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


def native_routes(
    engine: str,
    placement: str,
    kinds: tuple[str, ...],
    recipe: str,
    host: HostFacts,
    gpus: tuple[GpuFact, ...],
    profile: Profile | None,
) -> EngineRoutes:
    """An engine's one route, the native checkpoint on its recipe, marked when the profile names this engine."""
    route = native_route(engine, placement, kinds, gpus, host, NATIVE_DRIVER, recipe)
    return EngineRoutes((replace(route, profile=profile is not None),))
