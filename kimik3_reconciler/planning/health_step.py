"""Plan the readiness wait: "healthy" means /health answers 200, i.e. the model is loaded."""

from __future__ import annotations

from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.plan import Action, Step
from kimik3_reconciler.model.specs import HealthWait
from kimik3_reconciler.planning.launch import Launch

# Seed 000 measured ~17 min to read 802 GB (--load-mode none reads everything up front), i.e.
# ~0.8 GB/s; allow a quarter of that before calling a load stuck.
_LOAD_BYTES_PER_S = 200 * (1 << 20)
_STARTUP_S = 120.0


def load_timeout(total_bytes: int) -> float:
    return _STARTUP_S + total_bytes / _LOAD_BYTES_PER_S


def plan_health(launch: Launch, observed: Observed, container_step_changes: bool) -> Step:
    wait = HealthWait(container=launch.spec.name, url=launch.health_url,
                      timeout_s=load_timeout(observed.model.total_bytes))
    target = launch.health_url
    if container_step_changes:
        return Step("health", target, Action.READ, "wait for the model to load (/health 200)", spec=wait,
                    cost=f"load up to {wait.timeout_s / 60:.0f} min")
    health = observed.container.health if observed.container else None
    if health == "ok":
        return Step("health", target, Action.NOOP, "/health answers 200: model loaded", spec=wait)
    # A load already in progress is waited for, never relaunched.
    why = "model still loading (/health 503)" if health == "loading" else "/health not answering yet"
    return Step("health", target, Action.READ, f"{why}: wait", spec=wait)
