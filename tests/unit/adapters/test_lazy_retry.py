"""docker_engine's retry layer loads tenacity at a method's first transient error (a converged plan meets
none), and hands that error to tenacity as its first attempt: the same calls, waits and messages as a method
that went through tenacity from the start."""

from __future__ import annotations

import time

import pytest
from structlog.testing import capture_logs

from kimik3_reconciler.adapters.docker_engine import _transient
from kimik3_reconciler.errors import PermanentError, TransientError


def _flaky(failures: int) -> type:
    class Engine:
        def __init__(self) -> None:
            self.calls = 0

        @_transient
        def info(self) -> str:
            self.calls += 1
            if self.calls <= failures:
                raise TransientError(f"refused ({self.calls})")
            return "up"

    return Engine


def _run(engine_class: type, monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[float], list[str]]:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)  # tenacity's nap.sleep calls time.sleep
    engine = engine_class()
    with capture_logs() as logs:
        assert engine.info() == "up"
    return engine.calls, slept, [e["message"] for e in logs if e["event"] == "docker-retry"]


def test_the_first_transient_error_is_tenacitys_first_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    lazy = _flaky(2)
    calls, slept, said = _run(lazy, monkeypatch)
    assert calls == 3 and slept == [0.5, 1.0] and len(said) == 2
    assert said[0].startswith("refused (1): the docker daemon is not answering") and "attempt 1)" in said[0]
    eager = _flaky(2)
    eager.info.retry  # tenacity from the start, as the tests of the retry window arrange it  # noqa: B018
    assert _run(eager, monkeypatch) == (calls, slept, said)


def test_no_error_no_retry_and_a_permanent_error_is_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _run(_flaky(0), monkeypatch) == (1, [], [])

    class Engine:
        calls = 0

        @_transient
        def info(self) -> str:
            Engine.calls += 1
            raise PermanentError("no permission")

    with pytest.raises(PermanentError):
        Engine().info()
    assert Engine.calls == 1 and Engine.info.__name__ == "info"
