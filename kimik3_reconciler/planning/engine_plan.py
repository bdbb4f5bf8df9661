"""What one plan renders of its engine beside the launch, once, and holds on `Desired.plan`: the engine's plan
(`ServingEngine.render_plan`: the mode, hybrid or all-VRAM, a GGUF quant's; the placement forecast) and the routes.
The launch, the pre-read's memory check, the plan's forecast and routes lines read it instead of deriving it again.

The routes are made when first read (`kimik3 status --watch` renders a Desired and never reads them); they take the
plan's own gate verdict for the profile's route: feasible exactly when the plan is.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from kimik3_reconciler.engines.base import EnginePlan
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.planning.routes import RouteReport, profile_routes


class PlanOnHost:
    """The engine's plan for one profile on one observation, and the routes judged with it."""

    def __init__(self, profile: Profile, observed: Observed, rendered: EnginePlan, refusals: tuple[str, ...] = ()):
        self.profile, self.observed, self.refusals, self.rendered = profile, observed, refusals, rendered
        self.mode: Any = rendered.mode  # None: the engine sizes its memory with its own knobs
        self.forecast: Any = rendered.forecast

    @cached_property
    def routes(self) -> RouteReport:
        """The routes on this host, the profile's own judged by the plan's gate (`refusals`: none once it passed)."""
        return profile_routes(
            self.profile,
            self.observed.host,
            observed=self.observed,
            refusals=list(self.refusals),
            rendered=self.rendered,
        )
