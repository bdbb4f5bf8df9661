"""The fleet's router as systemd units (adapters/router_keep.py): `fleet apply`'s router step run as root inside a
container whose PID 1 is systemd (TESTING.md §6; this checkout and its venv's Python mounted at their own paths) starts
smg and kimik3's router as transient units; each one SIGKILLed (as the OOM killer does) is started again by systemd,
and kimik3's router registers the replica (support/stand_in_worker.py, served from this machine: the box shares its network)
with the restarted smg; the fleet's end stops both units. Ports 19671-19674 (router, smg metrics, smg, replica)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support import systemd_box
from support.realparts import REPO_ROOT, wait_for
from support.stand_in_worker import serve_worker
from support.systemd_box import remove, start_box

pytestmark = [pytest.mark.docker, pytest.mark.fleet_rollout]  # docker (the box) and the fleet extra (smg)

BOX, PORT, NAME = "kimik3-router-sd-itest", 19671, "k3sd"
REPLICA = f"http://127.0.0.1:{PORT + 3}"
PYTHON = str(REPO_ROOT / ".venv" / "bin" / "python")
STATE = "/var/lib/k3sd-state"  # in the box's own filesystem
SMG_UNIT, ROUTER_UNIT = f"kimik3-smg-{NAME}.service", f"kimik3-router-{NAME}.service"
DRIVER = f"""
import sys
from pathlib import Path
from types import SimpleNamespace
from kimik3_reconciler.cli.fleet_router import ensure_router, stop_router
from kimik3_reconciler.fleet.values import RouterPlacement
fleet = SimpleNamespace(name={NAME!r}, router=RouterPlacement("smg", "1.13.0", "localhost", {PORT}, "slots"))
if sys.argv[1] == "apply":
    ensure_router(fleet, Path({STATE!r}), {{"h1": {REPLICA!r}}}, lambda _url: True)
else:
    stop_router(Path({STATE!r}), {NAME!r})
"""


def in_box(*args: str, check: bool = True) -> str:
    return systemd_box.in_box(BOX, *args, check=check, timeout=180)


def show(unit: str, prop: str) -> str:
    return in_box("systemctl", "show", "-p", prop, "--value", unit)


def rotation() -> list[str]:
    try:
        return httpx.get(f"http://127.0.0.1:{PORT}/.kimik3/router/healthz", timeout=3).json()["rotation"]
    except httpx.HTTPError:
        return []


def in_smg() -> bool:
    try:
        workers = httpx.get(f"http://127.0.0.1:{PORT + 2}/workers", timeout=3).json()["workers"]
    except httpx.HTTPError:
        return False
    return any(w["url"] == REPLICA and w.get("status") == "ready" and w.get("is_healthy") for w in workers)


def smg_answers() -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{PORT + 2}/workers", timeout=3).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def box() -> Iterator[None]:
    # The venv's python is pyenv's: its tree and this checkout (the venv, the editable install) at their own paths.
    pyenv = Path(PYTHON).resolve().parents[2]
    start_box(BOX, "-v", f"{REPO_ROOT}:{REPO_ROOT}:ro", "-v", f"{pyenv}:{pyenv}:ro")
    try:
        yield
    finally:
        remove(BOX)


def test_systemd_starts_a_killed_smg_and_router_again(box: None) -> None:
    replica = serve_worker(PORT + 3)
    try:
        in_box(PYTHON, "-c", DRIVER, "apply")
        record = json.loads(in_box("cat", f"{STATE}/fleet/{NAME}/router.json"))
        assert record["supervisor"] == "systemd"
        assert record["units"] == {"pid": SMG_UNIT, "proxy_pid": ROUTER_UNIT}
        assert in_box("systemctl", "is-active", SMG_UNIT, ROUTER_UNIT).split() == ["active", "active"]
        assert show(SMG_UNIT, "Restart") == "always"
        wait_for("the replica in rotation", lambda: rotation() == [REPLICA], timeout=30)

        for unit in (SMG_UNIT, ROUTER_UNIT):
            pid = show(unit, "MainPID")
            in_box("systemctl", "kill", "--kill-whom=main", "--signal=SIGKILL", unit)  # as the OOM killer does
            wait_for(f"{unit} started again", lambda u=unit, p=pid: show(u, "MainPID") not in ("0", p), timeout=30)
            assert show(unit, "NRestarts") == "1"
            # smg's own list (it restarted empty), not kimik3's rotation: the last one stands while smg is away.
            wait_for("the replica in smg again", in_smg, timeout=30)
            wait_for("the replica in rotation again", lambda: rotation() == [REPLICA], timeout=30)

        in_box(PYTHON, "-c", DRIVER, "apply")  # `fleet apply` again: nothing restarted
        assert show(SMG_UNIT, "NRestarts") == "1"
        assert json.loads(in_box("cat", f"{STATE}/fleet/{NAME}/router.json")) == record

        in_box(PYTHON, "-c", DRIVER, "stop")
        states = in_box("systemctl", "is-active", SMG_UNIT, ROUTER_UNIT, check=False).split()
        assert states == ["inactive", "inactive"]
        assert not smg_answers() and rotation() == []
    finally:
        replica.shutdown()
