"""How the fleet's router is kept, as `fleet plan` and `fleet status` say it (cli/fleet_router.py): the plan's
router line names the supervisor `fleet apply` will use here; the record says which one a `fleet apply` used ('none'
for an earlier release's, which the next `fleet apply` replaces)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from support.ports import free_port

from kimik3_reconciler.adapters.router_keep import KEEPER, SYSTEMD, supervisor
from kimik3_reconciler.cli.fleet_router import _stop_one, record_path, recorded_supervisor, router_change
from kimik3_reconciler.fleet.values import RouterPlacement


def test_the_plan_says_how_the_router_it_starts_is_kept(tmp_path: Path) -> None:
    fleet = SimpleNamespace(name="f", router=RouterPlacement("smg", "1.13.0", "localhost", free_port(), "slots"))
    planned = router_change(fleet, tmp_path)
    assert planned["now"] == "nothing" and planned["supervisor"] == supervisor()
    words = {KEEPER: "kept by `kimik3 fleet keep`", SYSTEMD: "each a systemd unit"}[supervisor()]
    assert planned["change"].startswith("starts kimik3 router") and words in planned["change"]


def test_status_names_the_recorded_supervisor(tmp_path: Path) -> None:
    assert recorded_supervisor(tmp_path, "f") is None  # no `fleet apply` started one
    path = record_path(tmp_path, "f")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"pid": 1, "layout": {"proxy": True}}))  # an earlier release's record
    assert recorded_supervisor(tmp_path, "f") == "none"
    path.write_text(json.dumps({"pid": 1, "supervisor": KEEPER}))
    assert recorded_supervisor(tmp_path, "f") == KEEPER


def test_a_keepers_recorded_pid_reused_by_another_process_naming_smg_is_not_stopped() -> None:
    """The pid a keeper record names, reused since by a process with "smg" in its command line (not a keeper): left
    running (the marker was "smg" alone, so it was SIGTERMed)."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "smg"])
    try:
        _stop_one({"supervisor": KEEPER, "pid": other.pid}, "pid")
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_a_keeper_of_smg_in_the_record_is_stopped(tmp_path: Path) -> None:
    started = tmp_path / "child.pid"
    child = f"import os, time; open({str(started)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    keeper = subprocess.Popen(
        [sys.executable, "-m", "kimik3_reconciler", "fleet", "keep", "--", sys.executable, "-c", child, "smg"]
    )
    try:
        deadline = time.monotonic() + 30
        while not started.exists() and time.monotonic() < deadline:  # the keeper runs its child: past its start
            time.sleep(0.05)
        _stop_one({"supervisor": KEEPER, "pid": keeper.pid}, "pid")  # SIGTERM, and reaped: ours
        assert not Path(f"/proc/{keeper.pid}").exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            keeper.kill()
