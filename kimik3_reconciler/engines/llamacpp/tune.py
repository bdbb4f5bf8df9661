"""The knobs `kimik3 tune` searches on llama-server: ubatch and slots always; on GPUs the placement (the --fit
margin, or the manual --n-cpu-moe split around the written value), ranked before any load by the placement forecast.
Threads and load mode are not knobs (seed 000's fixed flags; planning/tune_space.check_candidate refuses them)."""

from __future__ import annotations

from typing import Any

from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.tuning import FIT

MIB = 1 << 20

UBATCHES = (512, 1024, 2048, 4096)
SLOTS = (1, 2, 4, 8)
FIT_TARGETS = (2048, 4096, 6144, 8192)  # MiB left free per GPU under --fit


def _around(value: int, steps: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sorted({max(0, value + s) for s in steps}))


def default_space(profile: Profile, observed: Observed) -> dict[str, tuple[Any, ...]]:
    """The knobs worth searching for this profile on this host, each with the running value among them."""
    running = observed.container.inputs if observed.container else {}
    ubatch = int(running.get("serve.ubatch") or profile.serve.ubatch or 4096)
    space: dict[str, tuple[Any, ...]] = {
        "ubatch": tuple(sorted({*UBATCHES, ubatch})),
        "parallel": tuple(sorted({*SLOTS, profile.serve.parallel})),
    }
    if profile.gpus != "none" and profile.build.variant != "cpu":
        if profile.serve.n_cpu_moe is not None:  # a manual split: around the written value, and --fit instead
            space["n_cpu_moe"] = (FIT, *_around(profile.serve.n_cpu_moe, (-8, -4, 0, 4, 8)))
        elif not isinstance(profile.serve.fit_target, list):  # --fit: the margin decides the CPU experts
            current = running.get("serve.fit_target") or profile.serve.fit_target
            space["fit_target"] = tuple(sorted({*FIT_TARGETS, *((int(current),) if current else ())}))
    return space


def split_rank(profile: Profile, observed: Observed, placement: Any, knobs: dict[str, Any]) -> tuple[Any, ...]:
    """How promising a candidate's expert split is before any load, lower first. Seed 000: "zero CPU experts is
    the lever": fewer CPU-resident expert layers is faster as long as it fits. So: a split the forecast (`placement`,
    the candidate's engine plan) fits with its margin left free on every GPU (serve.fit_target, else 1 GiB: the
    forecast is an estimate) before one that fits only inside it; then the fewest CPU expert layers, the fewest bytes
    of them; of equal splits the larger fit_target (the same placement with more room). Without a forecast (no GGUF
    header read yet): the written n_cpu_moe, fewest first."""
    margin = knobs.get("fit_target")
    if not isinstance(margin, int):
        margin = profile.serve.fit_target if isinstance(profile.serve.fit_target, int) else 1024
    fit_target = knobs.get("fit_target") if isinstance(knobs.get("fit_target"), int) else 0
    if placement is None:
        split = profile.serve.n_cpu_moe
        return (0, split if split is not None else 1 << 30, 0, -fit_target)
    free = {f"CUDA{i}": g.memory_free for i, g in enumerate(observed.host.gpus)}
    inside = any(d.device in free and d.total_bytes + margin * MIB > free[d.device] for d in placement.devices)
    return (int(inside), len(placement.cpu_expert_layers), placement.host_bytes, -fit_target)
