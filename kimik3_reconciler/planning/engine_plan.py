"""What one plan renders of its engine beside the launch, once, and holds on `Desired.plan`: the mode (hybrid or
all-VRAM: a GGUF quant's; a checkpoint engine's is NO_QUANT_MODE), the placement forecast and the routes. The launch,
the pre-read's memory check, the plan's forecast and routes lines read it instead of deriving it again.

The forecast and the routes are made when first read (`kimik3 status --watch` renders a Desired and reads neither).
The routes take the plan's own gate verdict for the profile's route: feasible exactly when the plan is.
"""

from __future__ import annotations

from functools import cached_property

from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.planning.placement import Forecast, forecast
from kimik3_reconciler.planning.routes import RouteReport, profile_routes
from kimik3_reconciler.planning.vram_fit import ModeDecision


class EnginePlan:
    """The engine's plan for one profile on one observation."""

    def __init__(self, profile: Profile, observed: Observed, mode: ModeDecision, refusals: tuple[str, ...] = ()):
        self.profile, self.observed, self.mode, self.refusals = profile, observed, mode, refusals

    @cached_property
    def forecast(self) -> Forecast | None:
        """Where the weights go on this host (planning/placement.py), from the one mode decision."""
        return forecast(self.profile, self.observed)

    @cached_property
    def routes(self) -> RouteReport:
        """The routes on this host, the profile's own judged by the plan's gate (`refusals`: none once it passed)."""
        return profile_routes(self.profile, self.observed.host, observed=self.observed, refusals=list(self.refusals))
