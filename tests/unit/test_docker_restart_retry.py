"""A dockerd restart is outlived: transient Docker errors are retried for DAEMON_RESTART_S (>= 60 s), each retry
saying the daemon is not answering and how long kimik3 keeps trying. No daemon: a stub client and a fake clock."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import requests.exceptions
import tenacity
from structlog.testing import capture_logs

from kimik3_reconciler.adapters.docker_engine import DAEMON_RESTART_S, DockerEngine
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


def daemon_down_until(clock: FakeTime, back_at: float) -> Any:
    def info() -> dict[str, Any]:
        if clock.now < back_at:
            raise requests.exceptions.ConnectionError("connection refused")
        return {"ServerVersion": "26"}
    return info


def test_the_restart_window_is_at_least_a_minute() -> None:
    assert DAEMON_RESTART_S >= 60


def test_a_daemon_back_after_40_s_is_waited_for_with_a_message_per_retry(clock: FakeTime) -> None:
    engine = DockerEngine()
    engine._client = SimpleNamespace(info=daemon_down_until(clock, clock.now + 40))
    with capture_logs() as logs:
        assert engine.info() == {"ServerVersion": "26"}
    retries = [entry for entry in logs if entry["event"] == "docker-retry"]
    assert len(retries) >= 5
    assert all("the docker daemon is not answering; kimik3 keeps trying for 90 s in all" in r["message"]
               for r in retries)
    assert "connection refused" in retries[0]["message"] and retries[0]["call"] == "info"


def test_a_daemon_that_stays_down_fails_after_the_window_not_before(clock: FakeTime) -> None:
    engine = DockerEngine()
    started = clock.now
    engine._client = SimpleNamespace(info=daemon_down_until(clock, float("inf")))
    with capture_logs(), pytest.raises(TransientError, match="docker daemon not answering"):
        engine.info()
    assert DAEMON_RESTART_S <= clock.now - started <= DAEMON_RESTART_S + 10


def test_container_logs_are_best_effort_while_the_daemon_is_down() -> None:
    engine = DockerEngine()
    def logs(*_: Any, **__: Any) -> bytes:
        raise requests.exceptions.ConnectionError("connection refused")
    engine._client = SimpleNamespace(api=SimpleNamespace(logs=logs))
    assert engine.container_logs("k3-fault-x", 20) == ""
