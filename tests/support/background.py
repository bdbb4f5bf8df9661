"""Processes a test starts in the background (a `kimik3 apply` it kills on purpose, a reconcile loop, a download
child, a local server): each started in a process group of its own, and at the test's teardown, whether it passed or
failed, that whole group is killed (SIGKILL) and reaped. A failed assertion between the start and the test's own kill
used to leave a `kimik3 apply` running, holding the state dir's and the host's lock, and the tests after it failed
on that lock. Use the `background` fixture (tests/conftest.py): `background.start([...], stdout=..., ...)`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


class Background:
    def __init__(self) -> None:
        self.started: list[subprocess.Popen] = []

    def start(self, argv: Sequence[str], **options: object) -> subprocess.Popen:
        """subprocess.Popen(argv, **options) in a new session: its process group is its pid, the test run's is not."""
        process = subprocess.Popen(list(argv), start_new_session=True, **options)  # type: ignore[call-overload]
        self.started.append(process)
        return process

    def kimik3(self, work: Path, *args: str, stdout: int = subprocess.DEVNULL, **env: str) -> subprocess.Popen:
        """`kimik3 ARGS` started in `work`, its state dir work/state and `env` besides; stderr piped as text."""
        environment = {**os.environ, "KIMIK3_STATE_DIR": str(work / "state"), **env}
        argv = [sys.executable, "-m", "kimik3_reconciler", *args]
        return self.start(argv, cwd=work, env=environment, stdout=stdout, stderr=subprocess.PIPE, text=True)

    def stop_all(self) -> None:
        for process in self.started:
            # The group, not just the pid: `kimik3 apply` runs docker and build children that would outlive it.
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # the group is gone already (the test killed it and its children exited)
            process.wait()
            for stream in (process.stdin, process.stdout, process.stderr):
                if stream is not None:
                    stream.close()
        self.started.clear()
