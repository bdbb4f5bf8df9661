"""The per-host lock in the state dir: flock(2) on `lock/host.lock`, who holds it in `lock/holder.json`.

The kernel is the lock: it drops a flock when its process dies, however it dies (kill -9, OOM), so a
stale lock is never left behind; the JSON record is only there to name the holder. A record found
by a process that just took the flock is therefore a dead holder's: `try_acquire` returns it as taken
over. Written by hand on fcntl rather than with the `filelock` package: force-unlock must remove the
file under a hung holder, and every acquirer must then check that the inode it locked is still the
one at the path (the classic flock-and-unlink race), which filelock does only in some versions.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path

from kimik3_reconciler.adapters.state_files import StateFiles
from kimik3_reconciler.errors import StepError
from kimik3_reconciler.model.host_lock import LOCK_FILE, LOCK_RECORD, LockAttempt, LockHolder

_SETTLE_S, _SETTLE_STEP_S = 1.0, 0.05


class StateDirLock:
    """One process holds at most one lock at a time through one of these."""

    def __init__(self, state_dir: Path):
        self.path = state_dir / LOCK_FILE
        self.records = StateFiles(state_dir)
        self._fd: int | None = None

    def try_acquire(self, holder: LockHolder) -> LockAttempt:
        # Nested locking in one process would deadlock a waiter forever (it is our own flock): a bug.
        if self._fd is not None:
            raise RuntimeError("the host lock is already held by this process")
        fd = self._flock()
        if fd is None:
            return LockAttempt(acquired=False, holder=self._settled_holder())
        self._fd = fd
        stale = self._record()
        self.records.write(LOCK_RECORD, holder.to_json())
        return LockAttempt(acquired=True, holder=stale)

    def release(self, holder: LockHolder) -> None:
        if self._fd is None:
            return
        try:
            current = self._record()
            # After a force-unlock the record may be the next holder's: leave that one alone.
            if current is not None and current.id == holder.id:
                self.records.delete(LOCK_RECORD)
        finally:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the descriptor drops the flock

    def holder(self) -> tuple[LockHolder | None, bool]:
        """The record and whether a live process holds the flock, read from /proc/locks: trying the lock,
        even for an instant, could make an apply starting in that instant fail with exit 5."""
        return self._record(), self._flocked()

    def break_lock(self) -> None:
        """force-unlock: remove the record, then the file; a holder still running keeps a flock on a
        removed inode, which excludes nobody (acquirers check the inode, see `_flock`)."""
        self.records.delete(LOCK_RECORD)
        self.path.unlink(missing_ok=True)

    def alive(self, holder: LockHolder) -> bool | None:
        """Whether the holder's process runs; None for a holder on another host (state dir shared)."""
        if holder.host != socket.gethostname():
            return None
        try:
            os.kill(holder.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # it exists, under another user
            return True
        return True

    def _flock(self) -> int | None:
        """A descriptor holding the flock on the file now at `path`, or None when another process holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return None
            except OSError as exc:  # e.g. ENOLCK on a filesystem without locks: say where, do not run unlocked
                os.close(fd)
                raise StepError(f"cannot lock {self.path}: {exc.strerror} (keep the state dir on a local "
                                "filesystem)") from exc
            # force-unlock may have removed the file between open and flock: a lock on a removed inode
            # excludes nobody, so start again on the file that is there now.
            try:
                current = os.stat(self.path)
            except FileNotFoundError:
                current = None
            if current is not None and os.path.samestat(os.fstat(fd), current):
                return fd
            os.close(fd)

    def _flocked(self) -> bool:
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:  # no lock file: nobody ever locked here
            return False
        try:
            table = Path("/proc/locks").read_text()
        except OSError:  # no procfs: try the lock after all (released at once)
            fd = self._flock()
            if fd is not None:
                os.close(fd)
            return fd is None
        # A line per lock: "1: FLOCK  ADVISORY  WRITE <pid> <major>:<minor>:<inode> 0 EOF" (hex device).
        file_id = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
        return any(len(f) > 5 and f[1] == "FLOCK" and f[5] == file_id for f in map(str.split, table.splitlines()))

    def _record(self) -> LockHolder | None:
        data = self.records.read(LOCK_RECORD)
        return LockHolder.from_json(data) if data else None

    def _settled_holder(self) -> LockHolder | None:
        """The holder's record; the winner of a race writes it just after its flock, so wait a moment
        while the record is missing or still names a process that is gone."""
        deadline = time.monotonic() + _SETTLE_S
        while True:
            record = self._record()
            if (record is not None and self.alive(record) is not False) or time.monotonic() >= deadline:
                return record
            time.sleep(_SETTLE_STEP_S)
