"""The knobs `kimik3 tune` may search on vLLM: concurrency (max_num_seqs), the scheduler's token budget
(max_num_batched_tokens) and the memory share (gpu_memory_utilization), each around the running value. Tensor
parallelism, the attention backend and the KV dtype are the recipe's (seed 001: benchmark before changing them)."""

from __future__ import annotations

from typing import Any

from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.profile import Profile

SEQS = (64, 128, 256, 512)
BATCHED_TOKENS = (2048, 8192, 16384)
MEMORY_SHARES = (0.85, 0.90, 0.95)


def default_space(profile: Profile, observed: Observed) -> dict[str, tuple[Any, ...]]:
    """The knobs worth searching, each with the profile's value among them (None: vLLM's default)."""
    knobs = profile.vllm
    space: dict[str, tuple[Any, ...]] = {
        "max_num_seqs": tuple(sorted({*SEQS, *((knobs.max_num_seqs,) if knobs.max_num_seqs else ())})),
        "max_num_batched_tokens": tuple(
            sorted({*BATCHED_TOKENS, *((knobs.max_num_batched_tokens,) if knobs.max_num_batched_tokens else ())})
        ),
    }
    if profile.gpus != "none":  # the CPU build sizes its KV cache by VLLM_CPU_KVCACHE_SPACE instead
        space["gpu_memory_utilization"] = tuple(sorted({*MEMORY_SHARES, knobs.gpu_memory_utilization}))
    return space
