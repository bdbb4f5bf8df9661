"""A route: one way to serve Kimi-K3 (an engine, a model form, a placement), judged on one host. Each engine judges
its own (`ServingEngine.routes`); planning/routes.py gathers them, in the registry's order, into the report that
`kimik3 routes` and the plan render."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Route:
    """One way to serve Kimi-K3, judged on one host."""

    engine: str  # llamacpp, vllm, sglang, ollama (model/engine_names.py's names, ollama aside)
    model: str  # repo[:quant]
    placement: str  # all-vram, hybrid, cpu, tp8, tp8-dcp8, -
    feasible: bool
    why: str  # the numbers it was judged on
    speed: str | None = None  # the seed's measured speed, with its source
    profile: bool = False  # the route the given profile takes

    @property
    def form(self) -> str:
        """The model form a route names where its repo holds several (a GGUF quant: `repo:quant`), else ""."""
        _, colon, form = self.model.rpartition(":")
        return form if colon else ""

    def line(self) -> str:
        mark = "yes" if self.feasible else "no "
        ours = " (this profile)" if self.profile else ""
        speed = f"; measured: {self.speed}" if self.speed else ""
        return f"{mark} {self.engine:<8} {self.model} {self.placement}{ours}: {self.why}{speed}"


def is_kind(name: str, kinds: tuple[str, ...]) -> bool:
    """A GPU's NVML name is one of `kinds`. Names read "NVIDIA B300 SXM6 AC", "NVIDIA GB300": a kind matches as a
    word, so B300 is not GB300 (the SGLang cookbook's B300 profile must not run on GB300: seed 001)."""
    return any(re.search(rf"(?<![A-Za-z0-9]){re.escape(kind)}(?![0-9])", name) for kind in kinds)
