"""How a rollout takes a host out of smg and puts it back (cli/fleet_apply.py `_take_out`, `_put_back`): removed (a
hold is not safe: bench/router_hold.py, tested in tests/unit/proofs/test_router_hold_bench.py), put back by add
when not listed, left to its own health checks otherwise. smg's side of it is tested on the real binary
(tests/integration/test_fleet_rollout_docker.py); here the decision."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from support.fakes import FakeClock

from kimik3_reconciler.adapters import router_smg
from kimik3_reconciler.adapters.router_smg import RouterWorker
from kimik3_reconciler.cli import fleet_apply
from kimik3_reconciler.errors import PlanError


def test_the_fleet_router_never_drops_a_worker_whose_probes_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(router_smg.shutil, "which", lambda name, path=None: "/opt/smg/bin/smg")
    assert "--no-remove-unhealthy-workers" in router_smg.smg_argv("127.0.0.1", 30000, 30001, "cache_aware")


@dataclass
class RecordedRouter:
    """smg as the step functions see it: its listing, and the calls that change it."""

    listed: dict[str, RouterWorker] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    def workers(self) -> list[RouterWorker]:
        return list(self.listed.values())

    def find(self, url: str) -> RouterWorker | None:
        return self.listed.get(url)

    def remove(self, worker_id: str) -> None:
        self.calls.append("remove")
        self.listed = {u: w for u, w in self.listed.items() if w.id != worker_id}

    def wait_gone(self, worker_id: str, timeout_s: float) -> bool:
        self.calls.append("wait_gone")
        # smg's drain ends: a worker listed `draining` is dropped
        self.listed = {u: w for u, w in self.listed.items() if not (w.id == worker_id and w.status == "draining")}
        return all(w.id != worker_id for w in self.listed.values())

    def add(self, url: str) -> str:
        self.calls.append("add")
        self.listed[url] = RouterWorker("new", url, "ready", True, "closed")
        return "new"

    def wait_in_rotation(self, url: str, timeout_s: float) -> RouterWorker:
        self.calls.append("wait_in_rotation")
        if url not in self.listed or not self.listed[url].in_rotation:
            raise router_smg.RouterError(f"{url} is not in the router's rotation (router sees it as {self.find(url)})")
        return self.listed[url]


A, B = "http://10.0.0.1:8080", "http://10.0.0.2:8080"


def _fleet(router: RecordedRouter) -> RecordedRouter:
    router.listed = {u: RouterWorker(f"id-{i}", u, "ready", True, "closed") for i, u in enumerate((A, B))}
    return router


@pytest.fixture(autouse=True)
def serving(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet_apply, "_serves", lambda url: True)
    monkeypatch.setattr(fleet_apply, "_served_tokens", lambda url, api_key: None)


def test_a_rollout_removes_the_host_it_takes_out() -> None:
    router = _fleet(RecordedRouter())
    fleet_apply._take_out(router, "a", A, 5, 1, lambda: 0)
    assert router.find(A) is None and router.calls == ["remove", "wait_gone"]


def test_a_removed_host_is_added_back() -> None:
    router = _fleet(RecordedRouter())
    fleet_apply._take_out(router, "a", A, 5, 1, lambda: 0)
    assert fleet_apply._put_back(router, "a", A, 0).startswith("in rotation")
    assert router.calls == ["remove", "wait_gone", "add", "wait_in_rotation"] and router.find(A).in_rotation


def test_a_host_still_listed_is_left_to_its_health_checks() -> None:
    router = _fleet(RecordedRouter())
    fleet_apply._put_back(router, "b", B, 0)
    assert router.calls == ["wait_in_rotation"]


def test_a_listed_host_out_of_rotation_fails_the_step_so_no_next_host_is_taken_out() -> None:
    """Listed but not ready or unhealthy (its probes still fail): nothing is added, and `router: in` waits for it in
    rotation and fails when it never gets there, so the rollout stops before the next host's `router: out`."""
    router = _fleet(RecordedRouter())
    router.listed[B] = RouterWorker("id-1", B, "not_ready", False, "closed")
    with pytest.raises(router_smg.RouterError, match="not in the router's rotation"):
        fleet_apply._put_back(router, "b", B, 0)
    assert router.calls == ["wait_in_rotation"]


def test_a_host_smg_still_drains_is_added_back_once_smg_drops_it() -> None:
    """`router: out` removed it and went on before smg's own drain (5 s) dropped it: left to its health checks, it
    would never come back; `router: in` waits the drain out and adds it."""
    router = _fleet(RecordedRouter())
    router.listed[A] = RouterWorker("id-0", A, "draining", True, "closed")
    assert fleet_apply._put_back(router, "a", A, 0).startswith("in rotation")
    assert router.calls == ["wait_gone", "add", "wait_in_rotation"] and router.find(A).in_rotation


def test_a_server_that_refuses_its_metrics_is_waited_on_for_the_whole_drain(capsys: pytest.CaptureFixture) -> None:
    """401 from /metrics (the old server holds a key the controller did not send) says nothing of the replies running
    there: the drain waits its timeout instead of going on at once and cutting them."""

    def refused() -> int | None:
        raise fleet_apply.MetricsRefused("HTTP 401")

    router = _fleet(RecordedRouter())
    started = time.monotonic()
    fleet_apply._take_out(router, "a", A, 0.5, 1, refused)
    assert time.monotonic() - started >= 0.45
    assert "refused /metrics (HTTP 401): waited the drain timeout" in capsys.readouterr().out


class SlowCapacity(RecordedRouter):
    """B is out of rotation (its own swap) until the clock reaches `back_at`: the capacity wait lasts that long."""

    def __init__(self, clock: FakeClock, back_at: float) -> None:
        super().__init__()
        self.clock, self.back_at = clock, back_at
        _fleet(self)
        self.listed[B] = RouterWorker("id-1", B, "ready", False, "closed")

    def workers(self) -> list[RouterWorker]:
        if self.clock.monotonic() >= self.back_at:
            self.listed[B] = RouterWorker("id-1", B, "ready", True, "closed")
        return super().workers()


def _clocked(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    clock = FakeClock()
    monkeypatch.setattr(fleet_apply, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep))
    return clock


def test_the_drain_gets_its_own_timeout_from_when_the_host_left_the_router(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The capacity wait used the whole drain timeout (B came back just before it ran out): the host's own replies
    still get the drain timeout, counted from its removal, not the ~0 s the shared deadline left them."""
    clock = _clocked(monkeypatch)
    router = SlowCapacity(clock, back_at=59.5)
    removed_at: list[float] = []
    remove = router.remove
    router.remove = lambda worker_id: (removed_at.append(clock.monotonic()), remove(worker_id))[1]

    def in_flight() -> int:  # one reply runs 20 s past the removal
        return 1 if clock.monotonic() < removed_at[0] + 20 else 0

    fleet_apply._take_out(router, "a", A, 60, 1, in_flight)
    assert removed_at[0] >= 59.5 and router.find(A) is None
    assert "a: out of the router, its requests ended" in capsys.readouterr().out
    assert clock.monotonic() - removed_at[0] < 60  # it went on once idle, not at the drain's end


def test_a_drain_that_outlasts_its_timeout_ends_at_the_timeout_counted_from_the_removal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    clock = _clocked(monkeypatch)
    router = SlowCapacity(clock, back_at=30)
    fleet_apply._take_out(router, "a", A, 60, 1, lambda: 2)
    assert "the drain timeout ended with 2 request(s) still on its server" in capsys.readouterr().out
    assert 90 <= clock.monotonic() <= 92  # 30 s for capacity, then the drain's own 60 s


def test_capacity_that_never_comes_is_still_refused_after_the_drain_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _clocked(monkeypatch)
    router = SlowCapacity(clock, back_at=float("inf"))
    with pytest.raises(PlanError, match=r"only 0 other host\(s\) in the router's rotation.*waited 60 s"):
        fleet_apply._take_out(router, "a", A, 60, 1, lambda: 0)
    assert router.calls == [] and router.find(A) is not None  # never taken out
    assert 60 <= clock.monotonic() <= 62
