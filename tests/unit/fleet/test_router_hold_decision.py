"""How a rollout takes a host out of smg and puts it back (model/router_health.py HOLD, cli/fleet_apply.py): removed
(a hold is not safe: smg puts a held worker back when its replies complete), or held when asked (the benchmark: its
probes fail, it stays listed with its part of the cache-aware tree); put back by release when held, by add when not
listed, left to its own health checks otherwise; removed where a hold does not take.
smg's side of it is tested on the real binary (tests/integration/test_router_hold_smg.py); here the decision."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import pytest

from kimik3_reconciler.adapters import router_smg
from kimik3_reconciler.adapters.router_smg import RouterWorker
from kimik3_reconciler.cli import fleet_apply
from kimik3_reconciler.model import router_health
from kimik3_reconciler.model.router_health import HOLD, RELEASE, back_in_step, is_held


@pytest.mark.parametrize(
    ("listed", "held", "step"),
    [(False, False, "add"), (True, True, "release"), (True, False, "wait")],
)
def test_back_in_adds_an_absent_host_releases_a_held_one_and_leaves_the_rest(
    listed: bool, held: bool, step: str
) -> None:
    assert back_in_step(listed, held) == step


def test_a_hold_fails_every_probe_and_a_release_restores_kimik3s_probe_timeout() -> None:
    assert HOLD["health"]["timeout_secs"] == 0
    flags = dict(zip(router_health.HEALTH[::2], router_health.HEALTH[1::2], strict=True))
    assert str(RELEASE["health"]["timeout_secs"]) == flags["--health-check-timeout-secs"]
    assert is_held(HOLD["labels"]) and not is_held(RELEASE["labels"]) and not is_held({})


def test_the_fleet_router_never_drops_a_worker_whose_probes_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(router_smg.shutil, "which", lambda name, path=None: "/opt/smg/bin/smg")
    assert "--no-remove-unhealthy-workers" in router_smg.smg_argv("127.0.0.1", 30000, 30001, "cache_aware")


@dataclass
class RecordedRouter:
    """smg as the step functions see it: `honors_hold` False is an smg whose 0 s probe does not fail."""

    honors_hold: bool = True
    listed: dict[str, RouterWorker] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    def workers(self) -> list[RouterWorker]:
        return list(self.listed.values())

    def find(self, url: str) -> RouterWorker | None:
        return self.listed.get(url)

    def _set(self, url: str, **change: object) -> None:
        self.listed[url] = replace(self.listed[url], **change)  # type: ignore[arg-type]

    def hold(self, worker_id: str) -> None:
        self.calls.append("hold")
        url = next(u for u, w in self.listed.items() if w.id == worker_id)
        self._set(url, held=True, **({"status": "not_ready", "healthy": False} if self.honors_hold else {}))

    def release(self, worker_id: str) -> None:
        self.calls.append("release")
        url = next(u for u, w in self.listed.items() if w.id == worker_id)
        self._set(url, held=False, status="ready", healthy=True)

    def wait_out_of_rotation(self, url: str, timeout_s: float) -> bool:
        return url not in self.listed or not self.listed[url].in_rotation

    def remove(self, worker_id: str) -> None:
        self.calls.append("remove")
        self.listed = {u: w for u, w in self.listed.items() if w.id != worker_id}

    def wait_gone(self, worker_id: str, timeout_s: float) -> bool:
        return True

    def add(self, url: str) -> str:
        self.calls.append("add")
        self.listed[url] = RouterWorker("new", url, "ready", True, "closed")
        return "new"

    def wait_in_rotation(self, url: str, timeout_s: float) -> RouterWorker:
        assert self.listed[url].in_rotation, self.listed[url]
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
    assert router.find(A) is None and router.calls == ["remove"]  # hold=False: what `router: out` does


def test_out_holds_the_host_when_asked_and_in_releases_it_so_its_tree_is_never_purged() -> None:
    router = _fleet(RecordedRouter())
    fleet_apply._take_out(router, "a", A, 5, 1, lambda: 0, hold=True)
    assert router.find(A).held and not router.find(A).in_rotation and router.calls == ["hold"]
    assert fleet_apply._put_back(router, "a", A, 0).startswith("in rotation")
    assert router.calls == ["hold", "release"] and router.find(A).id == "id-0"  # the same worker: never removed


def test_where_the_hold_does_not_take_the_host_is_removed_and_added_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(router_health, "HOLD_TAKES_S", 0.0)
    router = _fleet(RecordedRouter(honors_hold=False))
    fleet_apply._take_out(router, "a", A, 5, 1, lambda: 0, hold=True)
    assert router.find(A) is None and router.calls == ["hold", "release", "remove"]
    fleet_apply._put_back(router, "a", A, 0)
    assert router.calls[-1] == "add" and router.find(A).in_rotation


def test_a_host_left_listed_and_not_held_is_left_to_its_health_checks() -> None:
    router = _fleet(RecordedRouter())
    fleet_apply._put_back(router, "b", B, 0)
    assert router.calls == []


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
