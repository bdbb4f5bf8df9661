"""Step executors: one per payload type (model/specs.py); each makes its step true through the ports.

`EXECUTORS` is the one dispatch table: the engine checks every changing step of a plan against it
when the plan is made (`check_executable`), so a payload without an executor fails `kimik3 plan`,
not an apply halfway through.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.plan import Plan, Step
from kimik3_reconciler.model.specs import (
    ExporterRun,
    ExporterStop,
    ExporterUnit,
    GpuProbe,
    HealthWait,
    ImageBuild,
    LaunchContainer,
    ModelDownload,
    PagecachePreread,
    Payload,
    QuantGateRun,
    RemoveContainer,
    RemoveImage,
    RemoveModelFiles,
    RetagImage,
    SmokeTest,
    StartContainer,
    StopContainer,
    StopUnit,
    UnitInstall,
    UnitRemoval,
    WorkerImage,
    WorkerLaunch,
    WorkerRemove,
    WorkerWait,
    VerifyServer,
)
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.container import (
    launch_container,
    remove_container,
    start_container,
    stop_container,
)
from kimik3_reconciler.steps.exporter import run_exporter, run_exporter_unit, stop_exporter
from kimik3_reconciler.steps.gpu_probe import probe_gpus
from kimik3_reconciler.steps.health import wait_until_healthy
from kimik3_reconciler.steps.image import build_image, remove_image, retag_image
from kimik3_reconciler.steps.model import download_model, remove_model_files
from kimik3_reconciler.steps.preread import preread_model
from kimik3_reconciler.steps.quant_gate import run_quant_gate
from kimik3_reconciler.steps.report import Reporter
from kimik3_reconciler.steps.smoke import smoke_test
from kimik3_reconciler.steps.unit import install_unit, remove_unit, stop_unit
from kimik3_reconciler.steps.workers import launch_worker, remove_worker, wait_for_worker, worker_image
from kimik3_reconciler.steps.verify_server import verify_server

__all__ = ["EXECUTORS", "Reporter", "check_executable", "execute"]

Executor = Callable[[Any, Ports, Reporter], None]

EXECUTORS: dict[type[Payload], Executor] = {
    GpuProbe: probe_gpus,
    ModelDownload: download_model,
    RemoveModelFiles: remove_model_files,
    ImageBuild: build_image,
    RetagImage: retag_image,
    RemoveImage: remove_image,
    SmokeTest: smoke_test,
    QuantGateRun: run_quant_gate,
    StopContainer: stop_container,
    LaunchContainer: launch_container,
    StartContainer: start_container,
    RemoveContainer: remove_container,
    PagecachePreread: preread_model,
    HealthWait: wait_until_healthy,
    UnitInstall: install_unit,
    UnitRemoval: remove_unit,
    StopUnit: stop_unit,
    WorkerImage: worker_image,
    WorkerLaunch: launch_worker,
    WorkerWait: wait_for_worker,
    WorkerRemove: remove_worker,
    ExporterRun: run_exporter,
    ExporterStop: stop_exporter,
    ExporterUnit: run_exporter_unit,
    VerifyServer: verify_server,
}


def _executor(step: Step) -> Executor:
    executor = EXECUTORS.get(type(step.spec))
    if executor is None:
        raise PlanError(f"{step.kind} {step.target}: no executor for {type(step.spec).__name__} (steps/__init__.py)")
    return executor


def check_executable(plan: Plan) -> Plan:
    """Every step that changes something has an executor: checked when the plan is made."""
    for step in plan.changes:
        _executor(step)
    return plan


def execute(step: Step, ports: Ports, reporter: Reporter) -> None:
    _executor(step)(step.spec, ports, reporter)
