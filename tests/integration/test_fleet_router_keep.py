"""The fleet's router kept running without systemd (adapters/router_keep.py's keeper, what `fleet apply` uses in a
container and in CI): on real smg, kimik3's router and a stand-in replica (support/stand_in_worker.py). smg listens on loopback behind
kimik3's router; killed (SIGKILL, as the OOM killer does), smg is started again by its keeper and kimik3's router
registers the replica with it again; kimik3's router killed is started again too; `fleet status`'s router check passes
after each; a second `fleet apply` changes nothing; the fleet's end stops keepers and children. Ports 19661-19664
(router, smg metrics, smg behind, the replica)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from support.realparts import wait_for
from support.stand_in_worker import serve_worker

from kimik3_reconciler.adapters.router_keep import FIRST_S, KEEPER, supervisor
from kimik3_reconciler.adapters.router_smg import SmgRouter
from kimik3_reconciler.cli.fleet_router import (
    ensure_router,
    port_taken,
    record_path,
    router_now,
    router_problem,
    stop_router,
)
from kimik3_reconciler.fleet.router_layout import router_layout
from kimik3_reconciler.fleet.values import RouterPlacement

pytestmark = pytest.mark.fleet_rollout  # the fleet extra (smg): CI's fleet stage

PORT, REPLICA_PORT, NAME = 19661, 19664, "k3keep"
REPLICA = f"http://127.0.0.1:{REPLICA_PORT}"


def fleet() -> SimpleNamespace:
    return SimpleNamespace(name=NAME, router=RouterPlacement("smg", "1.13.0", "0.0.0.0", PORT, "slots"))


def child_of(keeper: int) -> int | None:
    """The keeper's child (smg or kimik3's router) now; None between two starts."""
    children = Path(f"/proc/{keeper}/task/{keeper}/children").read_text().split()
    return int(children[0]) if children else None


def answers(url: str) -> bool:
    smg = SmgRouter(url, timeout_s=2)
    try:
        return smg.answers()
    finally:
        smg.close()


def in_smg(url: str) -> bool:
    """smg lists the replica in rotation."""
    smg = SmgRouter(url, timeout_s=2)
    try:
        worker = smg.find(REPLICA)
    finally:
        smg.close()
    return worker is not None and worker.in_rotation


def rotation() -> list[str]:
    return httpx.get(f"http://127.0.0.1:{PORT}/.kimik3/router/healthz", timeout=3).json()["rotation"]


def healthy() -> bool:
    layout = router_layout(fleet().router)
    return router_problem(layout, router_now(layout)) is None


@pytest.mark.skipif(supervisor() != KEEPER, reason="systemd runs here: tests/integration/test_fleet_router_systemd.py")
def test_a_killed_smg_and_router_are_started_again_with_the_replica_back(tmp_path: Path) -> None:
    replica = serve_worker(REPLICA_PORT)
    state = tmp_path / "state"
    try:
        ensure_router(fleet(), state, {"h1": REPLICA}, lambda _url: True)
        record = json.loads(record_path(state, NAME).read_text())
        assert record["supervisor"] == KEEPER and not record.get("units")
        layout = router_layout(fleet().router)
        # smg's control API on loopback only; the clients' port and smg's metrics on router.host (0.0.0.0).
        assert layout.smg_url == f"http://127.0.0.1:{PORT + 2}" and layout.smg_metrics_url.startswith("http://0.0.0.0")
        listening = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout
        assert f"127.0.0.1:{PORT + 2} " in listening and f"0.0.0.0:{PORT + 2} " not in listening
        assert f"0.0.0.0:{PORT} " in listening and f"0.0.0.0:{PORT + 1} " in listening
        wait_for("the replica in rotation", lambda: rotation() == [REPLICA], timeout=30)

        time.sleep(FIRST_S)  # a first run shorter than this is a failed start, not retried
        smg = child_of(record["pid"])
        assert smg is not None
        os.kill(smg, signal.SIGKILL)
        wait_for("smg started again", lambda: child_of(record["pid"]) not in (smg, None) and answers(layout.smg_url))
        # Not kimik3's rotation (the last one stands while smg is away): smg's own list, which restarted empty.
        wait_for("the replica registered again by kimik3's router", lambda: in_smg(layout.smg_url), timeout=30)
        assert healthy()

        proxy = child_of(record["proxy_pid"])
        assert proxy is not None
        os.kill(proxy, signal.SIGKILL)
        wait_for(
            "kimik3's router started again", lambda: child_of(record["proxy_pid"]) not in (proxy, None) and healthy()
        )
        wait_for("its rotation read again", lambda: rotation() == [REPLICA], timeout=30)
        log = (record_path(state, NAME).parent / "router.log").read_text()
        assert f"pid {smg}) exited with status -9" in log  # the keeper says what it restarted

        ensure_router(fleet(), state, {"h1": REPLICA}, lambda _url: True)  # `fleet apply` again: nothing restarted
        assert json.loads(record_path(state, NAME).read_text()) == record
    finally:
        stop_router(state, NAME)
        replica.shutdown()
    assert not any(port_taken("127.0.0.1", p) for p in (PORT, PORT + 1, PORT + 2))


def test_the_keeper_stops_its_child_on_sigterm_and_does_not_retry_a_failed_start(tmp_path: Path) -> None:
    """`kimik3 fleet keep` alone: a child that exits at once (a start that fails) is not retried (its status comes
    back); SIGTERM reaches a running child and ends both."""
    keep = [sys.executable, "-m", "kimik3_reconciler", "fleet", "keep", "--"]
    failed = subprocess.run([*keep, sys.executable, "-c", "raise SystemExit(7)"], timeout=30)
    assert failed.returncode == 7
    marker = tmp_path / "child.pid"
    child = f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    keeper = subprocess.Popen([*keep, sys.executable, "-c", child])
    wait_for("the child", marker.exists, timeout=30)
    pid = int(marker.read_text())
    keeper.send_signal(signal.SIGTERM)
    assert keeper.wait(timeout=30) == 128 + signal.SIGTERM  # its child's end, as a shell says it
    assert not Path(f"/proc/{pid}").exists()
