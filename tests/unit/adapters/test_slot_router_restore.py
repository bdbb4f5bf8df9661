"""kimik3's router gives a restarted smg back its workers (adapters/slot_router.py `Rotation`), and only a restarted
one: an smg that was busy (a read timed out) while the rollout's `router: out` took its last worker out lists none
because of the rollout, and that worker must stay out (it was put back before the restart signal was smg's port
refusing a connection). Decided against a scripted smg: its worker list read after read, the workers added back."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client import CollectorRegistry

from kimik3_reconciler.adapters import slot_router
from kimik3_reconciler.adapters.router_smg import RouterError, RouterWorker

A = "http://10.0.0.1:8080"


def _failed(exc: Exception) -> RouterError:
    """What SmgRouter raises for an httpx error (`raise RouterError(...) from exc`)."""
    try:
        raise RouterError(f"router: GET /workers: {exc}") from exc
    except RouterError as error:
        return error


class ScriptedSmg:
    """smg's worker list read after read (a RouterError raised where the script says), then the last one for good."""

    def __init__(self, reads: list) -> None:
        self.reads, self.added = reads, []

    def workers(self) -> list[RouterWorker]:
        read = self.reads.pop(0) if len(self.reads) > 1 else self.reads[0]
        if isinstance(read, Exception):
            raise read
        return read

    def add(self, url: str) -> str:
        self.added.append(url)
        return "id"


def _follow(reads: list, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The workers the router registered again while following `reads`."""
    monkeypatch.setattr(slot_router, "ROTATION_POLL_S", 0.0)
    smg = ScriptedSmg(reads)
    rotation = slot_router.Rotation(smg, slot_router.RouterMetrics(CollectorRegistry()))  # type: ignore[arg-type]

    async def run() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(rotation.follow(), timeout=0.3)

    asyncio.run(run())
    return smg.added


def test_a_busy_smg_whose_last_worker_the_rollout_took_out_gets_it_not_back(monkeypatch: pytest.MonkeyPatch) -> None:
    serving = [RouterWorker("1", A, "ready", True, "closed")]
    timed_out = _failed(httpx.ReadTimeout("timed out"))
    assert _follow([serving, timed_out, []], monkeypatch) == []


def test_an_smg_restarted_empty_gets_its_workers_back(monkeypatch: pytest.MonkeyPatch) -> None:
    serving = [RouterWorker("1", A, "ready", True, "closed")]
    refused = _failed(httpx.ConnectError("[Errno 111] Connection refused"))
    added = _follow([serving, refused, []], monkeypatch)
    assert added == [A]


def test_once_the_restore_landed_the_rollouts_take_out_of_the_last_worker_stands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Restored, smg lists the worker in rotation again; the rollout then takes it out and smg restarts once more:
    the worker stays out (the restore's 30 s grace kept the old list, and put it back a second time)."""
    serving = [RouterWorker("1", A, "ready", True, "closed")]
    refused = _failed(httpx.ConnectError("[Errno 111] Connection refused"))
    assert _follow([serving, refused, [], serving, [], refused, []], monkeypatch) == [A]
