"""A dockerd restart is outlived: transient Docker errors are retried for DAEMON_RESTART_S (>= 60 s), each retry
saying the daemon is not answering and how long kimik3 keeps trying. No daemon: a stub client (or a socket path
nobody listens on) and a fake clock. Reads go over the unix socket (adapters/docker_socket.py) or through the SDK
(tcp, ssh, a named context): both transports' errors are classified and retried alike."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import requests.exceptions
import tenacity
from structlog.testing import capture_logs
from support.fakes.state import FakeClock

from kimik3_reconciler.adapters.docker_engine import DAEMON_RESTART_S, DockerEngine
from kimik3_reconciler.adapters.docker_socket import EngineSocket, EngineUnreachable
from kimik3_reconciler.errors import PermanentError, TransientError


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(tenacity, "time", fake)
    monkeypatch.setattr(DockerEngine.info.retry, "sleep", fake.sleep)
    return fake


def unreachable(os_error: OSError) -> EngineUnreachable:
    """As the socket reader raises it: EngineUnreachable from the socket's own error."""
    error = EngineUnreachable(f"/k3un.sock: {type(os_error).__name__}: {os_error}")
    error.__cause__ = os_error
    return error


# What a read raises while dockerd is away: through the SDK (requests), and over the socket.
DOWN = {
    "sdk": requests.exceptions.ConnectionError("connection refused"),
    "socket": unreachable(ConnectionRefusedError(111, "Connection refused")),
}


def daemon_down_until(clock: FakeClock, back_at: float, down: Exception = DOWN["sdk"]) -> Any:
    def info() -> dict[str, Any]:
        if clock.t < back_at:
            raise down
        return {"ServerVersion": "26"}

    return info


def test_the_restart_window_is_at_least_a_minute() -> None:
    assert DAEMON_RESTART_S >= 60


@pytest.mark.parametrize("transport", sorted(DOWN))
def test_a_daemon_back_after_40_s_is_waited_for_with_a_message_per_retry(clock: FakeClock, transport: str) -> None:
    engine = DockerEngine()
    engine._reads = SimpleNamespace(info=daemon_down_until(clock, clock.t + 40, DOWN[transport]))
    with capture_logs() as logs:
        assert engine.info() == {"ServerVersion": "26"}
    retries = [entry for entry in logs if entry["event"] == "docker-retry"]
    assert len(retries) >= 5
    assert all(
        "the docker daemon is not answering; kimik3 keeps trying for 90 s in all" in r["message"] for r in retries
    )
    assert "connection refused" in retries[0]["message"].lower() and retries[0]["call"] == "info"


@pytest.mark.parametrize("transport", sorted(DOWN))
def test_a_daemon_that_stays_down_fails_after_the_window_not_before(clock: FakeClock, transport: str) -> None:
    engine = DockerEngine()
    started = clock.t
    engine._reads = SimpleNamespace(info=daemon_down_until(clock, float("inf"), DOWN[transport]))
    with capture_logs(), pytest.raises(TransientError, match="docker daemon not answering"):
        engine.info()
    assert DAEMON_RESTART_S <= clock.t - started <= DAEMON_RESTART_S + 10


@pytest.mark.parametrize("transport", sorted(DOWN))
def test_the_exporters_engine_does_not_ride_out_a_restart(clock: FakeClock, transport: str) -> None:
    """`metrics-serve`'s engine: a scrape answers within its bound and asks again at the next one, so a restarting
    daemon fails the call at once (issue 30: each scrape waited 90 s), and says its own timeout when it hangs."""
    engine, calls, started = DockerEngine("unix:///k3un.sock", rides_out_restarts=False, timeout_s=2.0), [], clock.t
    engine._reads = SimpleNamespace(info=failing(DOWN[transport], calls))
    with capture_logs() as logs, pytest.raises(TransientError, match="docker daemon not answering"):
        engine.info()
    assert calls == [1] and clock.t == started and not [e for e in logs if e["event"] == "docker-retry"]
    engine._reads = SimpleNamespace(info=failing(unreachable(TimeoutError("timed out")), calls))
    with pytest.raises(PermanentError, match="did not answer within 2 s"):
        engine.info()


def test_container_logs_are_best_effort_while_the_daemon_is_down() -> None:
    engine = DockerEngine()

    def logs(*_: Any, **__: Any) -> bytes:
        raise requests.exceptions.ConnectionError("connection refused")

    engine._client = SimpleNamespace(api=SimpleNamespace(logs=logs))
    assert engine.container_logs("k3-fault-x", 20) == ""


# What is retried: only what a restarting daemon looks like (review of issue 13, item 5) ----------------


def socket_error(os_error: OSError) -> requests.exceptions.ConnectionError:
    """As the SDK raises it on a unix socket: ConnectionError(ProtocolError('Connection aborted.', OSError))."""
    import urllib3.exceptions

    return requests.exceptions.ConnectionError(urllib3.exceptions.ProtocolError("Connection aborted.", os_error))


def failing(error: Exception, calls: list[int]) -> Any:
    def info() -> dict[str, Any]:
        calls.append(1)
        raise error

    return info


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (
            socket_error(FileNotFoundError(2, "No such file or directory")),
            "no docker daemon: unix:///k3un.sock does not exist",
        ),
        (socket_error(PermissionError(13, "Permission denied")), "permission denied on the docker daemon's socket"),
        (requests.exceptions.ReadTimeout("read timed out"), "did not answer within 120 s"),
        (
            unreachable(FileNotFoundError(2, "No such file or directory")),
            "no docker daemon: unix:///k3un.sock does not exist",
        ),
        (unreachable(PermissionError(13, "Permission denied")), "permission denied on the docker daemon's socket"),
        (unreachable(TimeoutError("timed out")), "did not answer within 120 s"),
    ],
    ids=["sdk-no-socket", "sdk-permission", "sdk-timeout", "socket-no-socket", "socket-permission", "socket-timeout"],
)
def test_no_daemon_no_permission_or_a_timeout_fail_at_once_saying_why(
    clock: FakeClock, error: Exception, says: str
) -> None:
    engine, calls, started = DockerEngine("unix:///k3un.sock"), [], clock.t
    engine._reads = SimpleNamespace(info=failing(error, calls))
    with capture_logs() as logs, pytest.raises(PermanentError, match=says):
        engine.info()
    assert calls == [1] and clock.t == started and not [e for e in logs if e["event"] == "docker-retry"]


def test_a_socket_that_vanishes_after_the_daemon_answered_is_a_restart(clock: FakeClock) -> None:
    engine, calls = DockerEngine("unix:///k3un.sock"), []
    gone = socket_error(FileNotFoundError(2, "No such file or directory"))
    answers = iter([{"ServerVersion": "26"}])

    def info() -> dict[str, Any]:
        calls.append(1)
        if len(calls) == 1:
            return next(answers)
        if clock.t < 30:  # back 30 s after the clock started
            raise gone
        return {"ServerVersion": "27"}

    engine._reads = SimpleNamespace(info=info)
    assert engine.info() == {"ServerVersion": "26"}
    with capture_logs():
        assert engine.info() == {"ServerVersion": "27"}  # retried through the restart
    assert len(calls) > 3


def test_a_refused_or_reset_connection_is_retried(clock: FakeClock) -> None:
    for os_error in (ConnectionRefusedError(111, "Connection refused"), ConnectionResetError(104, "reset")):
        for error in (socket_error(os_error), unreachable(os_error)):  # through the SDK, over the socket
            engine, calls = DockerEngine(), []
            engine._reads = SimpleNamespace(info=failing(error, calls))
            with capture_logs(), pytest.raises(TransientError):
                engine.info()
            assert len(calls) > 3


def test_retries_do_not_nest(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """list_containers inspects each container: one retry layer (90 s), not 90 s per inspect inside 90 s."""
    monkeypatch.setattr(DockerEngine.list_containers.retry, "sleep", clock.sleep)
    monkeypatch.setattr(DockerEngine.inspect_container.retry, "sleep", clock.sleep)
    engine, inspects = DockerEngine(), []

    def inspect_container(name: str) -> dict[str, Any]:
        inspects.append(name)
        raise socket_error(ConnectionRefusedError(111, "Connection refused"))

    engine._reads = SimpleNamespace(containers=lambda **_: [{"Id": "a"}], inspect_container=inspect_container)
    started = clock.t
    with capture_logs(), pytest.raises(TransientError):
        engine.list_containers("kimik3.profile")
    assert clock.t - started <= DAEMON_RESTART_S + 10
    assert len(inspects) < 40  # one inspect per outer attempt (nested, each would retry for 90 s itself)


def test_the_real_socket_reader_classifies_as_the_sdk_does(clock: FakeClock, tmp_path: Path) -> None:
    """No socket at all and never answered: no daemon (at once); the same socket gone after an answer: a restart."""
    engine = DockerEngine(f"unix://{tmp_path}/docker.sock")
    assert isinstance(engine.reads, EngineSocket)
    with capture_logs() as logs, pytest.raises(PermanentError, match=f"^no docker daemon: unix://{tmp_path}"):
        engine.info()
    assert not [e for e in logs if e["event"] == "docker-retry"]
    engine._answered = True
    with capture_logs() as logs, pytest.raises(TransientError, match="its socket .* is gone"):
        engine.info()
    assert [e["call"] for e in logs if e["event"] == "docker-retry"][:1] == ["info"]
