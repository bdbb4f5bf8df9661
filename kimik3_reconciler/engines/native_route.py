"""The native checkpoint (moonshotai/Kimi-K3) that vLLM and SGLang serve (seed 001's recipes), as the routes judge
it (planning/routes.py): its repo, the lower bound of its bytes, and its route on an engine (the recipe's profile,
offered as a candidate the plan's gate judges). Pure, shared by the engines that serve it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kimik3_reconciler.engines.base import EnginePlan, RouteCandidate
from kimik3_reconciler.engines.gpus import claimed_gpus, is_nvidia
from kimik3_reconciler.model.facts import HostFacts, Observed
from kimik3_reconciler.model.humanize import gib
from kimik3_reconciler.model.model_files import CHECKPOINT
from kimik3_reconciler.model.profile import SECTIONS, Profile
from kimik3_reconciler.model.route import Route

if TYPE_CHECKING:
    from kimik3_reconciler.engines.base import ServingEngine

NATIVE_REPO = "moonshotai/Kimi-K3"

# Seed 001: 2.8T parameters; seed 000: SGLang/vLLM serve "the native MXFP4 checkpoint" (4-bit elements and an
# 8-bit scale per 32: 4.25 bits). A lower bound of its bytes (layers kept in higher precision only add): no seed
# gives the checkpoint's size, and a host below this bound cannot hold it whatever the engine.
NATIVE_PARAMETERS = 2_800_000_000_000
NATIVE_MIN_BYTES = NATIVE_PARAMETERS * 425 // 800


def native_profile(engine: ServingEngine, base: Profile) -> Profile:
    """The native checkpoint on `engine`, as `base` would run it: a profile of that engine is itself; another's takes
    the recipe's knobs (the engine's `native_route`) on all the host's GPUs."""
    if base.engine == engine.name:
        return base
    knobs = SECTIONS[f"{engine.name.capitalize()}Spec"](**engine.native_route.knobs)
    model = base.model.model_copy(
        update={"repo": NATIVE_REPO, "quant": CHECKPOINT, "local_path": None, "revision": "lower bound"}
    )
    return base.model_copy(update={"engine": engine.name, engine.name: knobs, "model": model, "gpus": "all"})


def native_candidate(engine: ServingEngine, base: Profile, host: HostFacts, profile: Profile | None) -> RouteCandidate:
    """The native checkpoint on vLLM or SGLang, judged by the plan's gate at the checkpoint's lower bound."""
    route_profile, native = native_profile(engine, base), engine.native_route
    needs = engine.host_needs(route_profile)
    section = getattr(route_profile, engine.name)  # the engine's own section (vllm: may be left out, its defaults)
    placement = native.placement.format(gpus=needs.gpus, **(section.model_dump() if section is not None else {}))

    def judge(refusals: list[str], plan: EnginePlan) -> Route:
        others = sorted({g.name for g in claimed_gpus(route_profile, host) if not is_nvidia(g)})
        if others:
            # Seed 001's AMD route (MI355X, MI350X) takes the ROCm image; kimik3 pulls the CUDA one, and any_gpu does
            # not change that (NVML never sees these GPUs on a real host).
            refusals = [f"{', '.join(others)}: seed 001's AMD route needs the ROCm image, which kimik3 does not deploy"]
        repo = route_profile.model.repo
        if refusals:
            bound = " (its weights counted at the lower bound: 2.8T parameters at MXFP4's 4.25 bits)"
            lower = any("checkpoint's weights" in r for r in refusals)
            return Route(engine.name, repo, placement, False, "; ".join(refusals) + (bound if lower else ""))
        used = claimed_gpus(route_profile, host)[: needs.gpus]
        names = ", ".join(sorted({g.name for g in used}))
        floor = f", driver {host.driver_version} >= R{needs.min_driver[0]}"
        return Route(
            engine.name,
            repo,
            placement,
            True,
            f"{len(used)}x {names} ({gib(sum(g.memory_total for g in used))}){floor}: {native.recipe}; no seed "
            "measured its speed",
        )

    ours = profile is not None and profile.engine == engine.name
    return RouteCandidate(route_profile, NATIVE_MIN_BYTES, judge, ours=ours)


class NativeRoutes:
    """The routes of an engine that serves the native checkpoint (vLLM, SGLang): its recipe's profile as the one
    candidate, ranked by its NativeRoute (seed 001's order). An engine class inherits it."""

    def route_candidates(
        self, base: Profile, host: HostFacts, profile: Profile | None, observed: Observed | None
    ) -> tuple[RouteCandidate, ...]:
        return (native_candidate(self, base, host, profile),)  # type: ignore[arg-type]  # the engine itself

    def route_rank(self, route: Route) -> tuple[int, str] | None:
        native = self.native_route  # type: ignore[attr-defined]  # the engine's NativeRoute
        return native.rank, native.because
