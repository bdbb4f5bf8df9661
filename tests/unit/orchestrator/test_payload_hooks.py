"""The orchestrator names no payload type: what an apply must know of a step (it starts the server, it runs the
apply's check, it waits on a load) is declared by the payload (model/specs.py's `Payload` class attributes), and
the apply's check reaches the steps on a copy of the ports, never by flipping the shared ones (issue 25)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from support.fakes import converged_fake

import kimik3_reconciler.orchestrator as orchestrator_module
from kimik3_reconciler.errors import VerifyFailed
from kimik3_reconciler.model import specs

FILES = {
    "UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00002.gguf": b"one" * 10,
    "UD-Q2_K_XL/k3-UD-Q2_K_XL-00002-of-00002.gguf": b"two" * 10,
}


def test_the_orchestrator_imports_no_payload_type() -> None:
    tree = ast.parse(Path(orchestrator_module.__file__).read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "kimik3_reconciler.model.specs"
        for alias in node.names
    }
    named = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)} & {p.__name__ for p in specs.PAYLOADS}
    assert imported == set() and named == set()


def test_each_hook_is_declared_by_the_payloads_that_need_it() -> None:
    assert {p.__name__ for p in specs.PAYLOADS if p.starts_server} == {"LaunchContainer", "StartContainer"}
    assert {p.__name__ for p in specs.PAYLOADS if p.checks} == {"VerifyServer"}
    assert {p.__name__ for p in specs.PAYLOADS if p.waits} == {"HealthWait"}


def test_verifying_copies_the_ports_and_leaves_the_shared_ones_unwired(tmp_path: Path) -> None:
    orchestrator, _, _, _ = converged_fake(tmp_path, FILES)
    check = lambda: None  # noqa: E731
    wired = orchestrator.ports.verifying(check)
    assert wired.verifier is check and wired.docker is orchestrator.ports.docker
    assert orchestrator.ports.verifier is None and orchestrator.ports.verifying(None) is orchestrator.ports


def test_a_failing_check_leaves_no_verifier_on_the_shared_ports(tmp_path: Path) -> None:
    orchestrator, docker, _, profile = converged_fake(tmp_path, FILES)
    docker.containers.clear()  # the container is gone: the apply launches it again, then checks that launch
    calls: list[int] = []

    def failing() -> None:
        calls.append(1)
        raise VerifyFailed("the text check failed")

    with pytest.raises(VerifyFailed):
        orchestrator.apply_or_revert(profile, failing)
    assert calls == [1] and orchestrator.ports.verifier is None


def test_which_payloads_take_a_server_down_is_the_payloads_own_answer() -> None:
    """Review of the merge (issue 30 on the seam): the room check and the revert trigger ask the payload, so a new
    step or a second engine's launch that replaces the server declares it instead of being added to a type list."""
    assert {p.__name__ for p in specs.PAYLOADS if p.stops_server} == {
        "StopContainer",
        "RemoveContainer",
        "UnitRemoval",
        "StopUnit",
    }
    container = specs.ContainerSpec(name="k3", image="i", command=(), env=(), mounts=(), gpus="none", labels=())
    assert specs.LaunchContainer(container, replace=True).takes_server_down()
    assert not specs.LaunchContainer(container, replace=False).takes_server_down()
    assert not specs.StartContainer("k3").takes_server_down() and specs.StopUnit("u.service").takes_server_down()
