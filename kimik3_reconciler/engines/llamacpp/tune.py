"""The knobs `kimik3 tune` searches on llama-server: ubatch and slots always; on GPUs the placement (the --fit
margin, or the manual --n-cpu-moe split around the written value). Threads and load mode are not knobs (seed
000's fixed flags; planning/tune_space.check_candidate refuses them)."""

from __future__ import annotations

from typing import Any

from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.tuning import FIT

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
