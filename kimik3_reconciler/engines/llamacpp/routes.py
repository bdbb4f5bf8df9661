"""llama.cpp's routes as `kimik3 routes` names them: each quant of the catalog (unsloth/Kimi-K3-GGUF), and the profile's
own GGUF where it is none of them, as a profile planning/routes.py judges with the plan's gate; the verdict said with
the numbers of the quant's plan (all-VRAM, hybrid or CPU; kimik3 builds llama.cpp's image for CUDA or the CPU only),
and the only serving speeds the seeds measured."""

from __future__ import annotations

from typing import Any

from kimik3_reconciler.engines.base import EnginePlan, RouteCandidate
from kimik3_reconciler.engines.gpus import claimed_gpus, is_nvidia
from kimik3_reconciler.engines.llamacpp.host_compat import arch_name
from kimik3_reconciler.engines.llamacpp.vram_fit import CUDA_CONTEXT_BYTES, MIB, quant_bytes
from kimik3_reconciler.model import catalog
from kimik3_reconciler.model.facts import HostFacts, Observed
from kimik3_reconciler.model.humanize import gib
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.route import Route

ENGINE = "llamacpp"
GGUF_REPO = "unsloth/Kimi-K3-GGUF"
# What `kimik3 routes` without a profile judges the routes as (LlamaCpp.routes_base: llama.cpp is the registry's default
# engine): a llama.cpp profile with every default (the CUDA build for this host's GPUs, the CPU build without them),
# the quant and engine of each route swapped in. The revision is a placeholder: routes judge GPUs, memory and
# driver, never fetch.
BASE = f"""apiVersion: kimik3/v1
name: routes
model: {{repo: {GGUF_REPO}, revision: "{"0" * 40}", quant: UD-Q2_K_XL}}
"""

# Seed 000 step 2, measured on 8x RTX PRO 6000 (2026-09-05); the only serving speeds the seeds give.
SEED_SPEEDS: dict[str, str] = {
    "UD-Q2_K_XL": "5.8 tok/s c1 (TTFT 4.6 s), 16.0 tok/s aggregate c8 at -ub 4096",
    "UD-IQ2_XXS": "13.9 tok/s c1, ~25 tok/s aggregate c4-c8",
    "UD-Q2_K_XL-REAP770": "~86 ms/token at 8 slots, 17.9 tok/s aggregate c16, TTFT 3.6 s c1",
}
SPEED_SOURCE = "seed 000 step 2 on 8x RTX PRO 6000"

# Seed 001, "vLLM vs SGLang vs llama.cpp": GGUF on llama.cpp when no native route fits; seed 000: all-VRAM decodes
# ~2x faster than the hybrid; the CPU build is the last resort. After vLLM's and SGLang's ranks (engines/native_route.py).
RANKS = {
    "all-vram": (2, "seed 001: no native route fits here; GGUF on llama.cpp, all-VRAM (seed 000: ~2x the hybrid)"),
    "hybrid": (3, "seed 001: no native route fits here; GGUF on llama.cpp, hybrid VRAM + RAM"),
    "cpu": (4, "seed 001: no GPU route here; the CPU build (expect it to be slow)"),
}


def quant_profile(base: Profile, quant: str, host: HostFacts, adapt: bool) -> Profile:
    """Catalog quant `quant` on llama.cpp, as `base` would run it: a llama.cpp profile keeps its build and GPUs,
    another engine's (or the CLI's default: `adapt`) gets the CUDA build for this host's GPUs (the CPU build without
    them); the quant's own sizing (fit_target, ubatch, batch, split: the catalog's defaults for it) and host.prepare on
    (kimik3 sets numa_balancing itself)."""
    if not adapt and base.engine == ENGINE and base.model.repo == GGUF_REPO and base.model.quant == quant:
        return base
    update: dict[str, Any] = {
        "engine": ENGINE,
        "model": base.model.model_copy(update={"repo": GGUF_REPO, "quant": quant, "local_path": None}),
        "serve": base.serve.model_copy(
            update={"fit_target": None, "n_cpu_moe": None, "ubatch": None, "batch": None, "spec_draft": None}
        ),
        "host": base.host.model_copy(update={"prepare": True}),
    }
    if adapt or base.engine != ENGINE:
        gpus = tuple(g for g in host.gpus if is_nvidia(g)) if host.gpu_probe == "ok" else ()
        build = {"variant": "cuda" if gpus else "cpu", "cpu_features": "auto"}
        update |= {"build": base.build.model_copy(update=build), "gpus": "all" if gpus else "none"}
    else:
        gpus = claimed_gpus(base, host)
    # The image is built for these GPUs (a build setting, not the hardware): build.cuda_architectures as they need.
    archs = sorted({arch_name(g.compute_capability) for g in gpus if g.compute_capability != (0, 0)})
    if archs:
        build = update.get("build", base.build)
        update["build"] = build.model_copy(update={"cuda_architectures": archs})
    return base.model_copy(update=update)


def quant_candidate(
    profile: Profile, host: HostFacts, size: int, why_size: str = "", *, ours: bool = False, own: bool = False
) -> RouteCandidate:
    """One quant on llama.cpp: feasible exactly when the plan's gate passes it here; the numbers either way. `own`:
    the profile's GGUF that is none of the catalog's (no seed speed; judged on its own observation)."""
    quant = profile.model.quant
    model = f"{profile.model.repo}:{quant}"
    # The seed's numbers are of one host and one mode: said with both, never as this host's speed.
    seeded = quant in SEED_SPEEDS and not own
    speed = f"{SEED_SPEEDS[quant]} ({catalog.quant_mode(quant)}, {SPEED_SOURCE})" if seeded else None
    gpus = claimed_gpus(profile, host)
    if profile.build.variant == "cuda" and any(not is_nvidia(g) for g in gpus):
        # kimik3 builds llama.cpp's image for CUDA only (Dockerfile.llamacpp, build.variant cuda or cpu).
        names = ", ".join(sorted({g.name for g in gpus if not is_nvidia(g)}))
        why = f"{names}: kimik3 builds llama.cpp's image for NVIDIA (CUDA) only"
        route = Route(ENGINE, model, "-", False, why, speed)
        return RouteCandidate(None, route=route, ours=ours, kimi=not own)

    def judge(refusals: list[str], plan: EnginePlan) -> Route:
        decision = plan.mode
        placement = "cpu" if not gpus or profile.build.variant == "cpu" else decision.mode
        sized = f"{gib(size)}{why_size}"
        if refusals:
            return Route(ENGINE, model, placement, False, "; ".join(refusals), speed)
        ram = host.ram_total or 0
        if placement == "cpu":
            others = sorted({g.name for g in host.gpus if not is_nvidia(g)})
            # kimik3 builds llama.cpp's image for CUDA or the CPU only: another vendor's GPUs hold none of it.
            unused = f" ({', '.join(others)}: kimik3 builds llama.cpp for CUDA only)" if others else ""
            why = (
                f"{sized} + 10 % fits the RAM ({gib(ram)}); no GPU{unused}: no seed measured a CPU-only Kimi-K3 "
                "(seed 001: expect it to be slow)"
            )
            return Route(ENGINE, model, placement, True, why)
        vram = sum(g.memory_total for g in gpus)
        if placement == "all-vram":
            margin = catalog.fit_margin(quant, "all-vram").default
            usable = sum(g.memory_total - CUDA_CONTEXT_BYTES - margin * MIB for g in gpus)
            why = (
                f"{sized} fits the {gib(usable)} usable on {len(gpus)} GPU(s) ({gib(vram)} less CUDA contexts and "
                f"--fit-target {margin} MiB each)"
            )
            return Route(ENGINE, model, placement, True, why, speed)
        in_ram = decision.cpu_bytes or 0
        measured = f" (seed 000 measured it: {decision.floor})" if decision.floor else ""
        why = (
            f"{sized} is more than the {gib(decision.usable_bytes)} usable on {len(gpus)} GPU(s): at least "
            f"~{gib(in_ram)} of experts in RAM ({gib(ram)}){measured}; seed 000: the hybrid decodes ~2x slower than "
            "all-VRAM"
        )
        return Route(ENGINE, model, placement, True, why, speed)

    return RouteCandidate(profile, size, judge, ours=ours, own_plan=not own, kimi=not own)


def _uncatalogued(profile: Profile, host: HostFacts, size: int | None) -> RouteCandidate:
    """The profile's own GGUF where it is none of the catalog's (another repo, another quant): judged at its files'
    size, or not at all before the hub lists them."""
    if not size:
        model = f"{profile.model.repo}:{profile.model.quant}"
        why = "its size is not known until the hub lists its files (not a quant of the catalog)"
        return RouteCandidate(None, route=Route(ENGINE, model, "-", False, why), ours=True, kimi=False)
    return quant_candidate(profile, host, size, " (its files)", ours=True, own=True)


def candidates(
    base: Profile, host: HostFacts, profile: Profile | None, observed: Observed | None
) -> tuple[RouteCandidate, ...]:
    """Every quant of the catalog on llama.cpp as `base` would run it (the profile's own quant sized from its files
    where `observed` lists them), the profile's own GGUF first where it is none of them."""
    mine = profile is not None and profile.engine == ENGINE
    size = quant_bytes(profile, observed)[0] if mine and observed is not None else None
    found: list[RouteCandidate] = []
    if mine and (catalog.lookup(profile.model.quant) is None or profile.model.repo != GGUF_REPO):
        found.append(_uncatalogued(profile, host, size))
    for info in catalog.CATALOG.values():
        ours = mine and (profile.model.repo, profile.model.quant) == (GGUF_REPO, info.name)
        if info.refused:
            route = Route(ENGINE, f"{GGUF_REPO}:{info.name}", "-", False, f"refused: {info.refused}")
            found.append(RouteCandidate(None, route=route, ours=ours))
        elif info.size_bytes is not None:
            route_profile = quant_profile(base, info.name, host, profile is None)
            found.append(quant_candidate(route_profile, host, size if ours and size else info.size_bytes, ours=ours))
    return tuple(found)


def rank(route: Route) -> tuple[int, str] | None:
    """Seed 001's order for a quant's route: by its placement (RANKS)."""
    return RANKS.get(route.placement)
