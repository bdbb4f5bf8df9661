"""Step executors: one per step kind; each makes its step true through the ports, nothing else."""

from __future__ import annotations

from kimik3_reconciler.model.plan import Step
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.container import run_container_step
from kimik3_reconciler.steps.health import wait_healthy
from kimik3_reconciler.steps.image import build_image
from kimik3_reconciler.steps.model import download_model
from kimik3_reconciler.steps.removal import remove
from kimik3_reconciler.steps.report import Reporter
from kimik3_reconciler.steps.smoke import smoke_test

__all__ = ["execute", "Reporter"]

_EXECUTORS = {
    "model": download_model,
    "tokenizer": download_model,
    "image": build_image,
    "smoke": smoke_test,
    "container": run_container_step,
    "health": wait_healthy,
}


def execute(step: Step, ports: Ports, reporter: Reporter) -> None:
    if step.action.name == "DELETE":
        remove(step, ports, reporter)
        return
    if step.kind == "conflict":
        ports.docker.stop_container(step.target)
        reporter.event("stopped", container=step.target, reason=step.reason)
        return
    _EXECUTORS[step.kind](step, ports, reporter)
