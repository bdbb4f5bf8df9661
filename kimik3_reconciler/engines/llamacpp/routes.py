"""llama.cpp's routes as `kimik3 routes` names them (planning/routes.py makes a profile of each quant of the
catalog and judges it with the plan's gate): the catalog's repo and the only serving speeds the seeds measured."""

from __future__ import annotations

GGUF_REPO = "unsloth/Kimi-K3-GGUF"

# Seed 000 step 2, measured on 8x RTX PRO 6000 (2026-09-05); the only serving speeds the seeds give.
SEED_SPEEDS: dict[str, str] = {
    "UD-Q2_K_XL": "5.8 tok/s c1 (TTFT 4.6 s), 16.0 tok/s aggregate c8 at -ub 4096",
    "UD-IQ2_XXS": "13.9 tok/s c1, ~25 tok/s aggregate c4-c8",
    "UD-Q2_K_XL-REAP770": "~86 ms/token at 8 slots, 17.9 tok/s aggregate c16, TTFT 3.6 s c1",
}
SPEED_SOURCE = "seed 000 step 2 on 8x RTX PRO 6000"
