"""Ctrl-C and SIGTERM in the middle of a command (a real `kimik3 apply` process, waiting for the state dir's
lock, which this test holds): the command unwinds as Ctrl-C does, says what the host is left with and what the
next apply does, and exits 128 + the signal; with --json the same as a JSON error on stdout. SIGTERM is what
systemd, docker, CI runners and `timeout` send: without kimik3's handler Python died silently with no cleanup."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.background import Background
from support.fakes import FakeClock

from kimik3_reconciler.adapters.host_lock import StateDirLock
from kimik3_reconciler.locking import new_holder

ROOT = Path(__file__).resolve().parents[3]


def _apply_waiting_for_the_lock(background: Background, tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "KIMIK3_HOST_LOCK": "off",
        "KIMIK3_STATE_DIR": str(tmp_path / "state"),
        "KIMIK3_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": str(ROOT),
    }
    command = [
        sys.executable,
        "-m",
        "kimik3_reconciler",
        "apply",
        *extra,
        "--lock-timeout",
        "5m",
        str(ROOT / "profiles" / "demo-cpu.yaml"),
    ]
    # SIGINT as a terminal's Ctrl-C would find it: a test run started in the background (`nohup … &`, as CI may be)
    # hands its children SIGINT ignored, and Python then (rightly) leaves it ignored.
    child = background.start(
        command,
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60
    line = ""
    # The waiting apply says so on stderr: a JSON event with --json, else one line for a person.
    while "lock-wait" not in line and "waiting for the host lock" not in line:
        line = child.stderr.readline()
        assert line and time.monotonic() < deadline, "the apply never reached the lock wait"
    return child


@pytest.mark.parametrize(("sig", "code", "name"), [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "SIGINT")])
@pytest.mark.parametrize("json_out", [False, True], ids=["text", "json"])
def test_a_signal_mid_apply_unwinds_says_so_and_exits_128_plus_it(
    tmp_path: Path, sig: int, code: int, name: str, json_out: bool, background: Background
) -> None:
    (tmp_path / "state").mkdir()
    other = StateDirLock(tmp_path / "state")
    assert other.try_acquire(new_holder("apply", "someone", FakeClock())).acquired
    child = _apply_waiting_for_the_lock(background, tmp_path, *(["--json"] if json_out else []))
    child.send_signal(sig)
    stdout, stderr = child.communicate(timeout=30)
    assert child.returncode == code, (stdout, stderr)
    assert f"error: interrupted by {name}" in stderr and "`kimik3 apply` again converges" in stderr
    assert "Traceback" not in stderr
    if json_out:
        error = json.loads(stdout)["error"]
        assert error["type"] == "Interrupted" and error["exit_code"] == code
    else:
        assert stdout == ""
