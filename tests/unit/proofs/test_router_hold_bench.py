"""bench/router_hold.py, the hold `bench/fleet_cache_rollout.py --out hold` measures (not kimik3's: a rollout removes
a host): its probes fail (a 0 s timeout), it stays listed with its part of smg's cache-aware tree, and is released
with kimik3's probe timeout back; where the hold does not take it is removed and added back. smg's side is tested on
the real binary (tests/integration/test_router_hold_smg.py); here the decision, on a recorded smg."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from bench import router_hold
from kimik3_reconciler.adapters.router_smg import RouterWorker
from kimik3_reconciler.cli import fleet_apply
from kimik3_reconciler.model import router_health

A, B = "http://10.0.0.1:8080", "http://10.0.0.2:8080"


def test_a_hold_fails_probes_sticks_once_taken_and_a_release_restores_kimik3s_probe_settings() -> None:
    hold = router_hold.HOLD["health"]
    assert hold["timeout_secs"] == 0 and hold["failure_threshold"] == 1
    assert hold["success_threshold"] * 2 >= 30 * 60  # probes every 2 s: no run of lucky probes puts it back
    flags = dict(zip(router_health.HEALTH[::2], router_health.HEALTH[1::2], strict=True))
    release = router_hold.RELEASE["health"]
    assert str(release["timeout_secs"]) == flags["--health-check-timeout-secs"]
    assert str(release["failure_threshold"]) == flags["--health-failure-threshold"]
    assert str(release["success_threshold"]) == flags["--health-success-threshold"]
    held, released = router_hold.HOLD["labels"], router_hold.RELEASE["labels"]
    assert router_hold.is_held(held) and not router_hold.is_held(released) and not router_hold.is_held({})


@dataclass
class RecordedRouter:
    """smg's listing and labels; `honors_hold` False is an smg whose 0 s probe does not fail."""

    honors_hold: bool = True
    listed: dict[str, RouterWorker] = field(default_factory=dict)
    labels: dict[str, dict] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    def workers(self) -> list[RouterWorker]:
        return list(self.listed.values())

    def find(self, url: str) -> RouterWorker | None:
        return self.listed.get(url)

    def patch(self, worker_id: str, body: dict) -> None:
        url = next(u for u, w in self.listed.items() if w.id == worker_id)
        holding = body == router_hold.HOLD
        self.calls.append("hold" if holding else "release")
        self.labels[url] = body["labels"]
        if holding and self.honors_hold:
            self.listed[url] = replace(self.listed[url], status="not_ready", healthy=False)
        elif not holding:
            self.listed[url] = replace(self.listed[url], status="ready", healthy=True)

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


@pytest.fixture
def router(monkeypatch: pytest.MonkeyPatch) -> RecordedRouter:
    recorded = RecordedRouter()
    recorded.listed = {u: RouterWorker(f"id-{i}", u, "ready", True, "closed") for i, u in enumerate((A, B))}
    monkeypatch.setattr(router_hold, "_patch", lambda router, worker_id, body: router.patch(worker_id, body))
    monkeypatch.setattr(router_hold, "held", lambda router, url: router_hold.is_held(router.labels.get(url, {})))
    monkeypatch.setattr(fleet_apply, "_serves", lambda url: True)
    monkeypatch.setattr(fleet_apply, "_served_tokens", lambda url, api_key: None)
    return recorded


def test_held_out_and_released_the_host_is_never_removed(router: RecordedRouter) -> None:
    router_hold.hold_out(router, "a", A, 5, 1, lambda: 0)
    assert router_hold.held(router, A) and not router.find(A).in_rotation and router.calls == ["hold"]
    warmed: list[str] = []
    assert router_hold.put_back_held(router, "a", A, 0, lambda: warmed.append(router.calls[-1])).startswith("in rot")
    assert warmed == ["hold"]  # warmed while still held out, then released
    assert router.calls == ["hold", "release"] and router.find(A).id == "id-0"  # the same worker: tree kept


def test_where_the_hold_does_not_take_the_host_is_removed_and_added_back(
    router: RecordedRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(router_hold, "TAKES_S", 0.0)
    router.honors_hold = False
    router_hold.hold_out(router, "a", A, 5, 1, lambda: 0)
    assert router.find(A) is None and router.calls == ["hold", "release", "remove"]
    router_hold.put_back_held(router, "a", A, 0)
    assert router.calls[-1] == "add" and router.find(A).in_rotation


def test_out_of_rotation_is_a_worker_not_listed_or_not_ready(router: RecordedRouter) -> None:
    assert not router_hold.wait_out_of_rotation(router, A, 0)
    router.patch("id-0", router_hold.HOLD)
    assert router_hold.wait_out_of_rotation(router, A, 0)
    assert router_hold.wait_out_of_rotation(router, "http://10.0.0.9:8080", 0)
