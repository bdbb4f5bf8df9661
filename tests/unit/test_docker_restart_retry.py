"""A dockerd restart is outlived: transient Docker errors are retried for DAEMON_RESTART_S (>= 60 s), each retry
saying the daemon is not answering and how long kimik3 keeps trying. No daemon: a stub client (or a socket path
nobody listens on) and a fake clock. Reads go over the unix socket (adapters/docker_socket.py) or through the SDK
(tcp, ssh, a named context): both transports' "not answering" errors are retried the same way."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import requests.exceptions
import tenacity
from structlog.testing import capture_logs

from kimik3_reconciler.adapters.docker_engine import DAEMON_RESTART_S, DockerEngine
from kimik3_reconciler.adapters.docker_socket import EngineSocket, EngineUnreachable
from kimik3_reconciler.errors import TransientError


class FakeTime:
    """Stands in for tenacity's `time`: monotonic() advances only when the retry sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    fake = FakeTime()
    monkeypatch.setattr(tenacity, "time", fake)
    monkeypatch.setattr(DockerEngine.info.retry, "sleep", fake.sleep)
    return fake


# What a read raises while dockerd is away: through the SDK (requests), and over the socket.
DOWN = {"sdk": requests.exceptions.ConnectionError("connection refused"),
        "socket": EngineUnreachable("/var/run/docker.sock: ConnectionRefusedError: [Errno 111] Connection refused")}


def daemon_down_until(clock: FakeTime, back_at: float, down: Exception = DOWN["sdk"]) -> Any:
    def info() -> dict[str, Any]:
        if clock.now < back_at:
            raise down
        return {"ServerVersion": "26"}
    return info


def test_the_restart_window_is_at_least_a_minute() -> None:
    assert DAEMON_RESTART_S >= 60


@pytest.mark.parametrize("transport", sorted(DOWN))
def test_a_daemon_back_after_40_s_is_waited_for_with_a_message_per_retry(clock: FakeTime, transport: str) -> None:
    engine = DockerEngine()
    engine._reads = SimpleNamespace(info=daemon_down_until(clock, clock.now + 40, DOWN[transport]))
    with capture_logs() as logs:
        assert engine.info() == {"ServerVersion": "26"}
    retries = [entry for entry in logs if entry["event"] == "docker-retry"]
    assert len(retries) >= 5
    assert all("the docker daemon is not answering; kimik3 keeps trying for 90 s in all" in r["message"]
               for r in retries)
    assert "connection refused" in retries[0]["message"].lower() and retries[0]["call"] == "info"


@pytest.mark.parametrize("transport", sorted(DOWN))
def test_a_daemon_that_stays_down_fails_after_the_window_not_before(clock: FakeTime, transport: str) -> None:
    engine = DockerEngine()
    started = clock.now
    engine._reads = SimpleNamespace(info=daemon_down_until(clock, float("inf"), DOWN[transport]))
    with capture_logs(), pytest.raises(TransientError, match="docker daemon not answering"):
        engine.info()
    assert DAEMON_RESTART_S <= clock.now - started <= DAEMON_RESTART_S + 10


def test_a_socket_nobody_listens_on_is_retried_as_a_daemon_restart(clock: FakeTime, tmp_path: Path) -> None:
    """The real socket reader: dockerd stopped leaves no socket (or a dead one) until it starts again."""
    engine = DockerEngine(f"unix://{tmp_path}/docker.sock")
    assert isinstance(engine.reads, EngineSocket)
    with capture_logs() as logs, pytest.raises(TransientError, match=f"^docker daemon not answering: {tmp_path}"):
        engine.info()
    assert [entry["call"] for entry in logs if entry["event"] == "docker-retry"][:1] == ["info"]


def test_container_logs_are_best_effort_while_the_daemon_is_down() -> None:
    engine = DockerEngine()
    def logs(*_: Any, **__: Any) -> bytes:
        raise requests.exceptions.ConnectionError("connection refused")
    engine._client = SimpleNamespace(api=SimpleNamespace(logs=logs))
    assert engine.container_logs("k3-fault-x", 20) == ""
