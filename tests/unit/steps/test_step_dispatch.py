"""Executors are chosen by payload type, and a step nothing can execute fails when the plan is made."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import pytest
from test_orchestrator import load, world  # noqa: F401 - `world` is a fixture

from kimik3_reconciler import planning
from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model import specs
from kimik3_reconciler.model.plan import Action, Step
from kimik3_reconciler.steps import EXECUTORS, resolve


def _payload_types() -> list[type]:
    return [
        c
        for _, c in inspect.getmembers(specs, inspect.isclass)
        if issubclass(c, specs.Payload) and c is not specs.Payload and c.__module__ == specs.__name__
    ]


def test_every_payload_has_exactly_one_executor_and_is_listed() -> None:
    assert sorted(t.__name__ for t in _payload_types()) == sorted(t.__name__ for t in specs.PAYLOADS)
    assert set(EXECUTORS) == set(specs.PAYLOADS)
    for payload, executor in EXECUTORS.items():  # each entry names a function that exists (imported when run)
        function = resolve(executor)
        assert callable(function) and function.__name__ == executor.__name__ and function is not executor, payload


def test_a_changing_step_needs_a_payload_and_a_payload_is_typed() -> None:
    with pytest.raises(TypeError, match="without a payload"):
        Step("container", "kimi-k3", Action.REPLACE, "why")
    with pytest.raises(TypeError, match="is not a step payload"):
        Step("container", "kimi-k3", Action.UPDATE, "why", spec={"what": "stop", "ref": "kimi-k3"})
    assert not Step("container", "kimi-k3", Action.NOOP, "running").changes  # a NOOP needs no payload


@dataclass(frozen=True)
class Reboot(specs.Payload):
    """A payload a newcomer added without its executor."""

    host: str


def test_a_step_without_an_executor_fails_when_the_plan_is_made(world, monkeypatch):  # noqa: F811
    orchestrator, docker, _, _ = world

    def plan_reboot(desired, observed, planned):
        return (Step("reboot", "this host", Action.UPDATE, "a new step kind", spec=Reboot("localhost")),)

    monkeypatch.setattr(planning, "PLANNERS", (*planning.PLANNERS, plan_reboot))
    with pytest.raises(PlanError, match="reboot this host: no executor for Reboot"):
        orchestrator.plan(load())
    with pytest.raises(PlanError, match="no executor for Reboot"):
        orchestrator.apply(load())
    assert docker.calls == []  # refused before any step ran, not halfway through an apply
