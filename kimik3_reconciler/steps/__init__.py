"""Step executors: one per payload type (model/specs.py); each makes its step true through the ports.

`EXECUTORS` is the one dispatch table: the orchestrator checks every changing step of a plan against it
when the plan is made (`check_executable`), so a payload without an executor fails `kimik3 plan`,
not an apply halfway through. Each executor's module is imported when a step of its kind runs
(`_in`): a no-op plan loads none of them (tests/unit/steps/test_step_dispatch.py resolves every entry).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.plan import Plan, Step
from kimik3_reconciler.model.specs import (
    ExporterRun,
    ExporterStop,
    ExporterUnit,
    ForgetDeployment,
    FrontHold,
    FrontRun,
    FrontStop,
    FrontUnit,
    GpuProbe,
    HealthWait,
    HostSettings,
    ImageBuild,
    ImagePull,
    LaunchContainer,
    LocalModelVerify,
    MemberCheckpoint,
    MemberImage,
    MemberLaunch,
    MemberRemove,
    MemberWait,
    ModelDownload,
    PagecachePreread,
    Payload,
    QuantGateRun,
    RemoveContainer,
    RemoveImage,
    RemoveModelFiles,
    RemoveVolume,
    RetagImage,
    SmokeTest,
    StartContainer,
    StopContainer,
    StopUnit,
    UnitInstall,
    UnitRemoval,
    VerifyServer,
    WorkerImage,
    WorkerLaunch,
    WorkerRemove,
    WorkerVolumeRemove,
    WorkerWait,
)
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.report import Reporter

__all__ = ["EXECUTORS", "Reporter", "check_executable", "execute"]

Executor = Callable[[Any, Ports, Reporter], None]


def _in(module: str, name: str) -> Executor:
    """The executor `name` of steps/<module>.py, imported when it first runs."""

    def run(spec: Any, ports: Ports, reporter: Reporter) -> None:
        return resolve(run)(spec, ports, reporter)

    run.__qualname__ = run.__name__ = name
    run.__module__ = f"kimik3_reconciler.steps.{module}"
    return run


def resolve(executor: Executor) -> Executor:
    """The function an `EXECUTORS` entry stands for (its module imported)."""
    return getattr(importlib.import_module(executor.__module__), executor.__name__)


EXECUTORS: dict[type[Payload], Executor] = {
    HostSettings: _in("host_settings", "apply_host_settings"),
    GpuProbe: _in("gpu_probe", "probe_gpus"),
    ModelDownload: _in("model", "download_model"),
    LocalModelVerify: _in("model", "verify_local_model"),
    RemoveModelFiles: _in("model", "remove_model_files"),
    ImageBuild: _in("image", "build_image"),
    ImagePull: _in("image_pull", "pull_image"),
    RetagImage: _in("image", "retag_image"),
    RemoveImage: _in("image", "remove_image"),
    SmokeTest: _in("smoke", "smoke_test"),
    QuantGateRun: _in("quant_gate", "run_quant_gate"),
    StopContainer: _in("container", "stop_container"),
    LaunchContainer: _in("container", "launch_container"),
    StartContainer: _in("container", "start_container"),
    RemoveContainer: _in("container", "remove_container"),
    RemoveVolume: _in("container", "remove_volume"),
    ForgetDeployment: _in("container", "forget_deployment"),
    PagecachePreread: _in("preread", "preread_model"),
    HealthWait: _in("health", "wait_until_healthy"),
    UnitInstall: _in("unit", "install_unit"),
    UnitRemoval: _in("unit", "remove_unit"),
    StopUnit: _in("unit", "stop_unit"),
    WorkerImage: _in("workers", "worker_image"),
    WorkerLaunch: _in("workers", "launch_worker"),
    WorkerWait: _in("workers", "wait_for_worker"),
    WorkerRemove: _in("workers", "remove_worker"),
    WorkerVolumeRemove: _in("workers", "remove_worker_volume"),
    MemberImage: _in("cluster", "member_image"),
    MemberCheckpoint: _in("cluster", "check_member_checkpoint"),
    MemberLaunch: _in("cluster", "launch_member"),
    MemberWait: _in("cluster", "wait_for_members"),
    MemberRemove: _in("cluster", "remove_member"),
    ExporterRun: _in("exporter", "run_exporter"),
    ExporterStop: _in("exporter", "stop_exporter"),
    ExporterUnit: _in("exporter", "run_exporter_unit"),
    FrontRun: _in("front", "run_front"),
    FrontStop: _in("front", "stop_front"),
    FrontHold: _in("front", "hold_clients"),
    FrontUnit: _in("front", "run_front_unit"),
    VerifyServer: _in("verify_server", "verify_server"),
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
