"""The orchestrator's side of issue 29 on fakes: a hold the apply made is released once per front when the apply
ends, after its check or its revert, whether it converged or failed; a plain apply() (tune's candidates, the
revert's own apply) releases at its own end; a release the front does not answer is an event, never the error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.fakes import FAKE_PROFILE, FAKE_REVISION, FakeHub, fake_ports
from support.fakes.processes import FakeProcesses

from kimik3_reconciler.errors import LoadFailed
from kimik3_reconciler.model.front import HoldOrder
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.model.records import front_config_key, front_key, front_token_key
from kimik3_reconciler.model.specs import FrontHold, FrontStop
from kimik3_reconciler.orchestrator import ApplyResult, Orchestrator
from kimik3_reconciler.steps.front import stop_front
from kimik3_reconciler.steps.report import NullReporter

URL = "http://127.0.0.1:8080/.kimik3/front"
ORDER = HoldOrder(drain_s=60, queue=64, wait_s=900, lease_s=1020, retry_after_s=12).to_json()


class RecordingFront:
    def __init__(self, status: int = 200) -> None:
        self.status, self.posts = status, []

    def post(self, url: str, token: str, body: dict[str, Any], timeout_s: float) -> tuple[int, dict[str, Any] | str]:
        self.posts.append((url, token))
        return (self.status, {"released_now": 3, "held_s": 4.2}) if self.status else (0, "ConnectionRefusedError")


@pytest.fixture
def orchestrator(tmp_path: Path) -> tuple[Orchestrator, RecordingFront]:
    ports, _ = fake_ports(FakeHub("org/k3", FAKE_REVISION, {}, tmp_path / "hub"))
    ports.front = RecordingFront()
    ports.state.write(front_token_key("k3"), {"token": "t0k"})
    return Orchestrator(ports, NullReporter(), tmp_path, tmp_path / "Dockerfile.llamacpp"), ports.front


def holding(orchestrator: Orchestrator, fail: Exception | None = None):  # noqa: ANN201
    def run(*_: object) -> ApplyResult:
        # Two holds of one front (the apply's and its revert's): one release.
        orchestrator._held += [FrontHold("k3", URL, ORDER), FrontHold("k3", URL, ORDER)]
        if fail is not None:
            raise fail
        return ApplyResult()

    return run


def test_a_converged_apply_releases_the_held_clients_once_at_its_end(orchestrator, monkeypatch) -> None:
    orch, front = orchestrator
    monkeypatch.setattr(orch, "_apply_or_revert", holding(orch))
    orch.apply_or_revert(parse_profile(FAKE_PROFILE, "t.yaml"))
    assert front.posts == [(f"{URL}/release", "t0k")]


def test_a_failed_apply_releases_them_too(orchestrator, monkeypatch) -> None:
    orch, front = orchestrator
    monkeypatch.setattr(orch, "_apply_or_revert", holding(orch, LoadFailed("the load failed\nreverted to ...")))
    with pytest.raises(LoadFailed):
        orch.apply_or_revert(parse_profile(FAKE_PROFILE, "t.yaml"))
    assert front.posts == [(f"{URL}/release", "t0k")]


def test_a_plain_apply_releases_at_its_own_end_and_a_silent_front_is_no_error(orchestrator, monkeypatch) -> None:
    orch, front = orchestrator
    front.status = 0
    monkeypatch.setattr(orch, "_apply", holding(orch))
    orch.apply(parse_profile(FAKE_PROFILE, "t.yaml"))
    assert front.posts == [(f"{URL}/release", "t0k")] and orch._held == []


def test_stopping_the_front_forgets_its_token_with_its_other_records(orchestrator) -> None:
    """Issue 38 item 4: destroy (and `metrics.handover` removed) left front/<name>/token.json behind."""
    orch, _ = orchestrator
    state = orch.ports.state
    orch.ports.processes = FakeProcesses(state, orch.ports.http)
    state.write(front_key("k3"), {"pid": 0, "fingerprint": "f"})
    state.write(front_config_key("k3"), {"profile": "k3"})
    stop_front(FrontStop("k3", 0), orch.ports, NullReporter())
    assert [state.read(key("k3")) for key in (front_key, front_config_key, front_token_key)] == [None, None, None]
