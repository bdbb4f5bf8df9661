"""`fleet apply`'s router record (cli/fleet_router.py): a pid it names is stopped only while it still runs what was
started there (kimik3's router: `-m kimik3_reconciler fleet route`; smg), not any process whose command line says
"kimik3" (a reused pid: another kimik3 command)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from kimik3_reconciler.cli.fleet_router import record_path, stop_router


def started(argv: list[str]) -> subprocess.Popen:
    """`argv` running, its command line readable (empty in /proc for a moment after the exec)."""
    process = subprocess.Popen(argv)
    deadline = time.monotonic() + 10
    while not Path(f"/proc/{process.pid}/cmdline").read_bytes().endswith(argv[-1].encode() + b"\0"):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return process


def test_a_reused_pid_running_another_kimik3_command_is_left_running(tmp_path: Path) -> None:
    other = started([sys.executable, "-c", "import time; time.sleep(60)", "kimik3", "fleet", "apply"])
    try:
        path = record_path(tmp_path, "f")
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"proxy_pid": other.pid, "layout": {"proxy": True}}))
        stop_router(tmp_path, "f")
        time.sleep(0.2)
        assert other.poll() is None, "a process that is not kimik3's router was stopped"
        assert not path.exists()
    finally:
        other.kill()
        other.wait()


def test_kimik3s_router_recorded_is_stopped(tmp_path: Path) -> None:
    route = [sys.executable, "-c", "import time; time.sleep(60)", "-m", "kimik3_reconciler", "fleet", "route"]
    router = started(route)
    try:
        path = record_path(tmp_path, "f")
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"proxy_pid": router.pid}))
        stop_router(tmp_path, "f")
        assert router.wait(5) is not None
    finally:
        router.kill()
        router.wait()
