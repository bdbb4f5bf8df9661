"""The quant catalog: what seed 000/001 measured about each Unsloth Kimi-K3 GGUF quant."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

GIB = 1024**3
GB = 1000**3

QuantMode = Literal["hybrid", "all-vram"]

# Seed 000: 8x RTX PRO 6000 = 765 GiB of VRAM; a quant below that (plus KV/scratch) is "all-VRAM".
VRAM_POOL_BYTES = 765 * GIB

REFERENCE_QUANT = "UD-Q2_K_XL"


@dataclass(frozen=True)
class QuantInfo:
    """One quant folder of unsloth/Kimi-K3-GGUF (or one made locally from it)."""

    name: str
    shards: int | None  # GGUF files in the folder; None = not measured
    size_bytes: int | None  # None = not measured
    mode: QuantMode  # hybrid: experts partly on CPU; all-vram: fits the 765 GiB pool
    vetted: bool  # passed text+vision+tool-call verify and the PPL/KLD gate on this hardware
    kld: float | None  # mean KLD vs the reference quant (UD-Q2_K_XL)
    top_token_agreement: float | None  # "same top p" vs the reference quant, 0..1
    refused: str | None = None  # why kimik3 will never serve it, or None
    note: str = ""


_CATALOG: tuple[QuantInfo, ...] = (
    # Seed 000 step 2: the three quants verified end-to-end on 8x RTX PRO 6000 (2026-09-05).
    QuantInfo("UD-Q2_K_XL", 19, 802 * GIB, "hybrid", True, 0.0, 1.0,
              note="the reference quality; ~130 GiB of experts on CPU; 5.8 tok/s c1, 16.0 tok/s c8 at -ub 4096"),
    QuantInfo("UD-IQ2_XXS", 16, 662 * GIB, "all-vram", True, 0.37, 0.846,
              note="13.9 tok/s c1, ~25 tok/s c4-c8; GSM8K 97.5 / HumanEval 95.7 / MBPP 97.0 %"),
    QuantInfo("UD-Q2_K_XL-REAP770", 1, 697 * GIB, "all-vram", True, 0.047, 0.954,
              note="made locally (14 % least-used experts sliced off); HumanEval 86.6 % / MBPP 85.5 %: not for coding"),
    # Seed 000: "UD-TQ2_0 is known to produce corrupted logits on these GPUs".
    QuantInfo("UD-TQ2_0", None, None, "hybrid", False, None, None,
              refused="known to produce corrupted logits on sm_120 (seed 000)"),
    # Seed 001: sizes from the Unsloth model card; mechanically supported, never vetted here.
    QuantInfo("UD-Q4_K_XL", None, int(1.51e12), "hybrid", False, None, None,
              note="~1.51 TB (seed 001): twice the VRAM pool"),
    QuantInfo("UD-IQ1_M", None, 649 * GB, "all-vram", False, None, None),
    QuantInfo("UD-IQ1_S", None, 594 * GB, "all-vram", False, None, None),
)

CATALOG: dict[str, QuantInfo] = {q.name: q for q in _CATALOG}

_IQ_TQ = re.compile(r"^(?:UD-)?(?:IQ|TQ)[0-9]", re.IGNORECASE)


def lookup(quant: str) -> QuantInfo | None:
    """The catalog entry for a quant folder name (exact, case-sensitive as on the Hub), or None."""
    return CATALOG.get(quant)


def is_iq_or_tq(quant: str) -> bool:
    """True for i-quant/ternary folders (UD-IQ2_XXS, IQ4_XS, UD-TQ2_0): seed 000 gates these before serving."""
    return bool(_IQ_TQ.match(quant))


def quant_mode(quant: str) -> QuantMode:
    """hybrid or all-vram; an unknown quant counts as hybrid (the safe launch defaults)."""
    info = lookup(quant)
    return info.mode if info else "hybrid"
