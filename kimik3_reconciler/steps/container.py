"""Ensure container: create, replace (remove then create) or start the profile's container."""

from __future__ import annotations

from kimik3_reconciler.model.plan import Action, Step
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.report import Reporter


def run_container_step(step: Step, ports: Ports, reporter: Reporter) -> None:
    if step.action is Action.UPDATE:
        ports.docker.start_container(step.target)
        reporter.event("started", container=step.target)
        return
    if step.action is Action.REPLACE:
        # GPUs and the port are exclusive: the old container must be gone before the new one starts.
        ports.docker.remove_container(step.target)
        reporter.event("removed", container=step.target)
    container_id = ports.docker.run_container(step.spec)
    reporter.event("launched", container=step.target, id=container_id[:12])
