"""kimik3's helper processes on the host (the metrics exporter, the front): spawned detached with only the
environment they read (model/helper_env.py), found by /proc/<pid>/cmdline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kimik3_reconciler.adapters.log_cap import (
    CAP_BYTES,
    LOG_FILE_ENV,
    open_log,
    rotate_if_over,
)
from kimik3_reconciler.model.helper_env import helper_environment


class LocalProcesses:
    def __init__(self, state_dir: Path, log_cap: int = CAP_BYTES):
        self.state_dir, self.log_cap = Path(state_dir), log_cap

    def spawn(self, args: tuple[str, ...], log_key: str, reads: tuple[str, ...]) -> int:
        log = self.state_dir / log_key
        log.parent.mkdir(parents=True, exist_ok=True)
        rotate_if_over(
            log, self.log_cap
        )  # a process restarted again and again (a crash loop) grows it at each start too
        out = open_log(log)
        try:
            # Its own session: a Ctrl-C or the end of this kimik3 does not reach it; stdin closed. It caps its
            # own log from then on (log_cap.py), found through KIMIK3_LOG_FILE. Its environment: what it reads
            # and no more (the apply's HF_TOKEN would sit in /proc/PID/environ for the helper's whole life).
            env = helper_environment(
                os.environ, reads, {"KIMIK3_STATE_DIR": str(self.state_dir), LOG_FILE_ENV: str(log.resolve())}
            )
            process = subprocess.Popen(
                [sys.executable, "-m", "kimik3_reconciler", *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )
        finally:
            os.close(out)
        return process.pid

    def invocation(self) -> tuple[tuple[str, ...], dict[str, str]]:
        # The interpreter and the directory kimik3_reconciler is imported from: a unit runs this kimik3.
        package_root = str(Path(__file__).resolve().parents[2])
        return (sys.executable, "-m", "kimik3_reconciler"), {
            "KIMIK3_STATE_DIR": str(self.state_dir.resolve()),
            "PYTHONPATH": package_root,
        }

    def cmdline(self, pid: int) -> tuple[str, ...] | None:
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        if not raw:  # a zombie (our own child not reaped yet) has an empty cmdline: not running
            return None
        return tuple(part.decode(errors="replace") for part in raw.rstrip(b"\0").split(b"\0"))

    def terminate(self, pid: int, timeout_s: float) -> None:
        if not _signalled(pid, signal.SIGTERM):
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            _reap(pid)
            if self.cmdline(pid) is None:
                return
            time.sleep(0.05)
        _signalled(pid, signal.SIGKILL)
        _reap(pid)


def _signalled(pid: int, sig: signal.Signals) -> bool:
    """Send `sig` to `pid`; False when there is no such process (it is gone already: nothing to stop)."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def _reap(pid: int) -> None:
    """Collect the exit status when the exporter is our own child (spawned by this very process)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
