"""Running a rendered playbook with `ansible-playbook` (ansible-core, the `fleet` extra) and the fleet-wide lock.

The playbook and inventory are files kimik3 wrote (fleet/playbook.py); ansible-playbook is run with an argv, its
output passed through to kimik3's stderr line by line, its temp folder under the run folder, ssh's control sockets
in a short folder of /tmp (a unix socket path is at most 107 bytes).

The fleet lock is flock(2) on `<state>/fleet/<name>/lock`, held for the whole `fleet apply`: a second rollout of
the same fleet from this controller is refused at once, naming the holder. The kernel drops it when the holder
dies, however it dies, so a killed rollout never leaves it behind.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kimik3_reconciler.errors import InputError, LockHeld


def ansible_playbook() -> str:
    """The ansible-playbook next to this interpreter (the venv kimik3 runs from), else on PATH."""
    found = shutil.which("ansible-playbook", path=str(Path(sys.executable).parent)) or shutil.which("ansible-playbook")
    if found is None:
        raise InputError("ansible-playbook is not installed: pip install 'kimik3[fleet]'")
    return found


def run_playbook(run_dir: Path, playbook: Path, inventory: Path, log) -> int:  # noqa: ANN001 - a text stream
    """ansible-playbook's exit status (0 ok, 2 a host failed, 4 a host unreachable, ...)."""
    # ssh's ControlPath is a unix socket (at most 107 bytes): a short folder of its own, not under the state dir.
    control = tempfile.mkdtemp(prefix="k3cp-", dir="/tmp")
    env = {
        **os.environ,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_LOCAL_TEMP": str(run_dir / "tmp"),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": control,
        "ANSIBLE_PIPELINING": "1",
    }
    env.pop("ANSIBLE_CONFIG", None)  # the run's settings are these, not an ansible.cfg found in the cwd
    try:
        process = subprocess.Popen(
            [ansible_playbook(), "-i", str(inventory), str(playbook)],
            cwd=run_dir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        assert process.stdout is not None
        for line in process.stdout:
            log.write(line)
            log.flush()
        return process.wait()
    finally:
        shutil.rmtree(control, ignore_errors=True)


class FleetLock:
    """flock on `path` while in the `with` block; LockHeld (naming the holder's pid and start) when taken."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def __enter__(self) -> FleetLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode(errors="replace")
            os.close(fd)
            raise LockHeld(
                f"another `kimik3 fleet apply` (or `fleet recover`) holds the fleet lock {self.path} ({holder or 'holder unknown'})"
                "; it stops by itself, or kill it: the kernel then drops the lock"
            ) from None
        os.ftruncate(fd, 0)
        os.write(
            fd,
            json.dumps({"pid": os.getpid(), "since": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}).encode(),
        )
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None
