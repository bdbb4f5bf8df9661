"""The native checkpoint (moonshotai/Kimi-K3) that vLLM and SGLang serve (seed 001's recipes), as the routes judge
it (planning/routes.py): its repo and the lower bound of its bytes. Pure facts, shared by the engines that serve it
and the routes."""

from __future__ import annotations

NATIVE_REPO = "moonshotai/Kimi-K3"

# Seed 001: 2.8T parameters; seed 000: SGLang/vLLM serve "the native MXFP4 checkpoint" (4-bit elements and an
# 8-bit scale per 32: 4.25 bits). A lower bound of its bytes (layers kept in higher precision only add): no seed
# gives the checkpoint's size, and a host below this bound cannot hold it whatever the engine.
NATIVE_PARAMETERS = 2_800_000_000_000
NATIVE_MIN_BYTES = NATIVE_PARAMETERS * 425 // 800
