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

# Seed 001: "K3 supports 1,048,576 tokens" (the official model specification; seed 000: "1M context").
# llama.cpp only warns on a -c above the GGUF's kimi-k3.context_length (reference/llama-cpp.md §1.3).
CONTEXT_LENGTH = 1_048_576
# Seed 001: "start with 131072" (vLLM's --max-model-len 131072): a limit per request. llama-server gives each of
# --parallel slots ctx_size/parallel tokens (without --kv-unified: reference/llama-cpp.md §1.1 `-np`), so the
# default total is this times serve.parallel.
REQUEST_CONTEXT = 131_072


@dataclass(frozen=True)
class FitMargin:
    """The --fit-target (MiB left free per GPU) seed 000 measured for a quant in one mode."""

    default: int  # what the launch uses when serve.fit_target is omitted
    minimum: int | None  # below it the seed says the server fails (None: no floor known)
    spills_at: int | None  # at or above it the seed measured expert layers spilling to the CPU (None: not seen)
    measured: bool  # False: the seed's generic value, not measured for this quant
    source: str  # the seed passage the numbers come from


# Seed 000 step 5: "all-VRAM needs --fit-target 6144, otherwise the CUDA scratch pool OOMs on the first
# request after a full load" -- the value for an all-VRAM quant nobody measured.
ALL_VRAM_STEP5 = FitMargin(6144, 6144, None, False, "seed 000 step 5 (all-VRAM needs --fit-target 6144)")
# The seed gives no margin for the hybrid path (--fit moves the experts that do not fit to the CPU):
# kimik3's default, the value the shipped hybrid profile uses.
HYBRID_FIT = FitMargin(4096, None, None, False, "kimik3's hybrid default (seed 000 gives no hybrid margin)")


@dataclass(frozen=True)
class MeasuredRam:
    """Host RAM a hybrid quant was measured to keep busy on one host (its CPU experts, --fit's split)."""

    cpu_bytes: int  # the experts llama.cpp kept in RAM there
    gpus: int  # the GPUs of the split there
    vram_bytes: int  # their total memory: a host whose GPUs hold no more keeps at least cpu_bytes in RAM
    source: str  # the seed passage


# Seed 000 step 2: "UD-Q2_K_XL (19 shards, 802 GiB) - hybrid, ~130 GiB of experts on CPU" on 8x RTX PRO 6000
# (765 GiB of VRAM), with --fit's split (step 5's default).
Q2_K_XL_RAM = MeasuredRam(
    130 * GIB, 8, VRAM_POOL_BYTES, "seed 000 step 2 measured ~130 GiB on 8x RTX PRO 6000 (765 GiB of VRAM)"
)

# llama-server's host-RAM prompt cache (--cache-ram) when the profile leaves serve.cache_ram out: 8192 MiB in the
# pinned b11434 (reference/llama-cpp.md §1.1, `prompt cache is enabled, size limit: 8192 MiB`).
CACHE_RAM_DEFAULT_MIB = 8192
# The context checkpoints llama-server keeps per slot (--ctx-checkpoints) when the profile does not set it: 32 in
# b11434 (reference/llama-cpp.md §1.1) and in the pinned mainline tree (common/common.h n_ctx_checkpoints).
CTX_CHECKPOINTS_DEFAULT = 32


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
    all_vram_fit: FitMargin | None = None  # the margin measured for it all-VRAM; None: step 5's default
    # Made on the user's host, not a folder of the repo (seed 000: REAP770 slices experts out of UD-Q2_K_XL): a
    # profile serving it names its file (`model.local_path`); the hub has nothing to download.
    made_locally: bool = False
    hybrid_ram: MeasuredRam | None = None  # the RAM its hybrid was measured to keep; None: not measured


_CATALOG: tuple[QuantInfo, ...] = (
    # Seed 000 step 2: the three quants verified end-to-end on 8x RTX PRO 6000 (2026-09-05).
    QuantInfo(
        "UD-Q2_K_XL",
        19,
        802 * GIB,
        "hybrid",
        True,
        0.0,
        1.0,
        note="the reference quality; ~130 GiB of experts on CPU; 5.8 tok/s c1, 16.0 tok/s c8 at -ub 4096",
        hybrid_ram=Q2_K_XL_RAM,
    ),
    QuantInfo(
        "UD-IQ2_XXS",
        16,
        662 * GIB,
        "all-vram",
        True,
        0.37,
        0.846,
        note="13.9 tok/s c1, ~25 tok/s c4-c8; GSM8K 97.5 / HumanEval 95.7 / MBPP 97.0 %",
        # Seed 000 step 5: the all-VRAM quant of the recipe OOMs on the first request below 6144.
        all_vram_fit=FitMargin(6144, 6144, None, True, "seed 000 step 5 (all-VRAM needs --fit-target 6144)"),
    ),
    QuantInfo(
        "UD-Q2_K_XL-REAP770",
        1,
        697 * GIB,
        "all-vram",
        True,
        0.047,
        0.954,
        note="made locally (14 % least-used experts sliced off); HumanEval 86.6 % / MBPP 85.5 %: not for coding",
        # Seed 000 step 2: ~86 ms/token at 8 slots with --fit-target 4096; "a 6144 margin silently
        # spills 2-3 expert layers to the CPU and costs 40 %".
        all_vram_fit=FitMargin(
            4096,
            4096,
            6144,
            True,
            "seed 000 step 2 (REAP770: --fit-target 4096; 6144 spills 2-3 expert layers to the CPU, -40 %)",
        ),
        made_locally=True,
    ),
    # Seed 000: "UD-TQ2_0 is known to produce corrupted logits on these GPUs".
    QuantInfo(
        "UD-TQ2_0",
        None,
        None,
        "hybrid",
        False,
        None,
        None,
        refused="known to produce corrupted logits on sm_120 (seed 000)",
    ),
    # Seed 001: sizes from the Unsloth model card; mechanically supported, never vetted here.
    QuantInfo(
        "UD-Q4_K_XL", None, int(1.51e12), "hybrid", False, None, None, note="~1.51 TB (seed 001): twice the VRAM pool"
    ),
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
    """The mode seed 000 measured for `quant` on its 8x96 GB host (hybrid or all-vram); an unknown quant
    counts as hybrid (the safe launch defaults). A host with other GPUs may place it otherwise."""
    info = lookup(quant)
    return info.mode if info else "hybrid"


def fit_margin(quant: str, mode: QuantMode) -> FitMargin:
    """The fit-target margin for `quant` served in `mode` (pure: the mode comes from the catalog or from a
    placement derived for the host's GPUs). All-VRAM: the quant's measured margin, else step 5's 6144."""
    if mode == "hybrid":
        return HYBRID_FIT
    info = lookup(quant)
    return info.all_vram_fit if info is not None and info.all_vram_fit is not None else ALL_VRAM_STEP5


def measured_ram(quant: str) -> MeasuredRam | None:
    """The RAM the seed measured `quant`'s hybrid to keep on its host, or None (not measured)."""
    info = lookup(quant)
    return info.hybrid_ram if info is not None else None
