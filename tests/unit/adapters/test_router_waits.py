"""smg's waits (adapters/router_smg.py `polled`: one loop): in rotation, gone; each asks again
every POLL_S until it holds or the timeout passed, asks at least once, and says what it saw last."""

from __future__ import annotations

import time

import pytest

from kimik3_reconciler.adapters.router_smg import POLL_S, RouterError, RouterWorker, SmgRouter, polled

URL = "http://10.0.0.1:8080"


class ScriptedRouter(SmgRouter):
    """smg's GET /workers answering from a script: one listing per ask, the last one repeated."""

    def __init__(self, *listings: list[RouterWorker]) -> None:
        super().__init__("http://127.0.0.1:9")
        self.listings, self.asked = list(listings), 0

    def workers(self) -> list[RouterWorker]:
        self.asked += 1
        return self.listings[min(self.asked, len(self.listings)) - 1]


def _worker(status: str = "ready", healthy: bool = True, breaker: str = "closed") -> RouterWorker:
    return RouterWorker("w1", URL, status, healthy, breaker)


def test_in_rotation_is_asked_until_it_holds() -> None:
    router = ScriptedRouter([], [_worker("pending")], [_worker(breaker="open")], [_worker()])
    assert router.wait_in_rotation(URL, timeout_s=5) == _worker() and router.asked == 4


def test_not_in_rotation_at_the_timeout_raises_with_what_smg_said_last() -> None:
    router = ScriptedRouter([_worker(healthy=False)])
    started = time.monotonic()
    with pytest.raises(RouterError, match="not in the router's rotation after 0 s .*healthy=False"):
        router.wait_in_rotation(URL, timeout_s=0.5)
    assert 0.5 <= time.monotonic() - started < 0.5 + 3 * POLL_S and router.asked >= 2


def test_gone_once_the_worker_is_no_longer_listed() -> None:
    router = ScriptedRouter([_worker("draining")], [_worker("draining")], [])
    assert router.wait_gone("w1", 5) and router.asked == 3
    assert not ScriptedRouter([_worker("draining")]).wait_gone("w1", 0.3)


def test_a_zero_timeout_still_asks_once_and_an_error_is_not_retried() -> None:
    assert polled(lambda: 1, lambda seen: seen == 1, 0) == (1, True)
    assert polled(lambda: 2, lambda seen: seen == 1, 0) == (2, False)

    def refused() -> int:
        raise RouterError("router http://127.0.0.1:9: GET /workers: refused")

    with pytest.raises(RouterError, match="refused"):
        polled(refused, lambda seen: True, 5)
