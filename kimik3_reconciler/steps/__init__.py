"""Step executors: one per step kind; each makes its step true through the ports, nothing else."""

from __future__ import annotations

from kimik3_reconciler.model.plan import Step
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.container import run_container_step
from kimik3_reconciler.steps.gate import run_quant_gate
from kimik3_reconciler.steps.health import wait_healthy
from kimik3_reconciler.steps.image import build_image
from kimik3_reconciler.steps.model import download_model
from kimik3_reconciler.steps.removal import remove
from kimik3_reconciler.steps.report import Reporter
from kimik3_reconciler.steps.smoke import smoke_test
from kimik3_reconciler.steps.unit import run_unit_step

__all__ = ["execute", "Reporter"]

_EXECUTORS = {
    "model": download_model,
    "tokenizer": download_model,
    "reference": download_model,
    "gate": run_quant_gate,
    "image": build_image,
    "smoke": smoke_test,
    "container": run_container_step,
    "health": wait_healthy,
    "unit": run_unit_step,
}


def execute(step: Step, ports: Ports, reporter: Reporter) -> None:
    if step.action.name == "DELETE" and step.kind != "unit":  # the unit executor removes its own files
        remove(step, ports, reporter)
        return
    if step.kind == "conflict" and step.spec.what == "unit" and ports.units is not None:
        # Its kimik3 unit supervises it: stopping only the container, systemd would start it again.
        ports.units.systemctl("stop", step.spec.ref)
        reporter.event("stopped", unit=step.spec.ref, reason=step.reason)
        return
    if step.kind in ("conflict", "stop"):
        ports.docker.stop_container(step.target)
        reporter.event("stopped", container=step.target, reason=step.reason)
        return
    _EXECUTORS[step.kind](step, ports, reporter)
