"""llama-server's batch sizing where the profile leaves it out (seed 000 step 5): the mode's ubatch, a batch never
below it, and whether serve.n_cpu_moe splits the experts by hand. The quant's mode and fit margin are the catalog's
(model/catalog.py); a planner that derived the mode for the host's GPUs (vram_fit.py) passes its own."""

from __future__ import annotations

from kimik3_reconciler.model.catalog import QuantMode
from kimik3_reconciler.model.profile import Profile, ServeSpec

# Seed 000 step 5: BATCH/UBATCH 4096 for hybrid (copies the CPU experts once per prompt, halves TTFT),
# 2048 for all-VRAM (the fix for the CUDA scratch pool's OOM on the first request).
UBATCH: dict[QuantMode, int] = {"hybrid": 4096, "all-vram": 2048}


def default_ubatch(mode: QuantMode) -> int:
    """--ubatch-size when the profile omits it: 4096 hybrid, 2048 all-VRAM (seed 000 step 5)."""
    return UBATCH[mode]


def ubatch_for(profile: Profile, mode: QuantMode) -> int:
    """serve.ubatch, else 4096 hybrid and 2048 all-VRAM (seed 000 step 5)."""
    # hybrid: copy the CPU experts to GPU0 once per prompt, halves TTFT; all-VRAM: 2048 avoids scratch OOM.
    return profile.serve.ubatch if profile.serve.ubatch is not None else default_ubatch(mode)


def batch_for(profile: Profile, mode: QuantMode) -> int:
    """serve.batch, else the mode's BATCH (seed 000: = UBATCH), never below the effective ubatch."""
    if profile.serve.batch is not None:
        return profile.serve.batch
    # rule: batch-below-ubatch
    # llama.cpp lowers ubatch to batch silently: a default batch must not undo the ubatch rule.
    return max(default_ubatch(mode), ubatch_for(profile, mode))


def effective_ubatch(profile: Profile) -> int:
    """serve.ubatch, else the default of the catalog's mode (the plan uses the host's: vram_fit.py)."""
    return ubatch_for(profile, profile.quant_mode)


def effective_batch(profile: Profile) -> int:
    return batch_for(profile, profile.quant_mode)


def manual_split(serve: ServeSpec) -> bool:
    """True when `n_cpu_moe` pins the split (-ngl 999 --n-cpu-moe N) instead of --fit."""
    return serve.n_cpu_moe is not None
