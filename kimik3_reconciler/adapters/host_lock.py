"""The per-host lock: flock(2) on the state dir's `lock/host.lock` (who holds it in `lock/holder.json`) and on
a host-wide file (`/run/lock/kimik3.lock`, the holder's JSON inside it), taken together.

The state dir's lock covers every kimik3 using that state dir; the host-wide one covers every kimik3 on the
host whatever its state dir (two users, two `KIMIK3_STATE_DIR`s converging one dockerd). Where the host-wide
file cannot be used (no writable /run/lock, a read-only /run) kimik3 goes on with the state dir's lock alone
and says so (`LockAttempt.note`).

The kernel is the lock: it drops a flock when its process dies, however it dies (kill -9, OOM), so a
stale lock is never left behind; the JSON record is only there to name the holder. A record found
by a process that just took the flock is therefore a dead holder's: `try_acquire` returns it as taken
over. Written by hand on fcntl rather than with the `filelock` package: force-unlock must remove the
file under a hung holder, and every acquirer must then check that the inode it locked is still the
one at the path (the classic flock-and-unlink race), which filelock does only in some versions.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import stat
import time
from collections.abc import Callable
from pathlib import Path

from kimik3_reconciler.adapters.state_files import StateFiles
from kimik3_reconciler.errors import StepError
from kimik3_reconciler.model.env_knobs import knob_value
from kimik3_reconciler.model.host_lock import LOCK_FILE, LOCK_RECORD, LockAttempt, LockHolder

_SETTLE_S, _SETTLE_STEP_S = 1.0, 0.05
HOST_LOCK_DEFAULT = Path("/run/lock/kimik3.lock")  # FHS: lock files shared by every user of the host
# Owner-writable, world-readable: only its creator writes the holder record (at 0666 any local user could
# rewrite or empty it); another user's kimik3 still takes the flock through a read-only descriptor (flock needs
# no write access), so two users' kimik3s still exclude each other. A mode cannot stop a user who can read the
# file from holding the flock: a host that must, points KIMIK3_HOST_LOCK into a folder only its operators read.
LOCK_FILE_MODE = 0o644


def host_lock_path() -> Path | None:
    """KIMIK3_HOST_LOCK (a path; `off` = none), else /run/lock/kimik3.lock."""
    return knob_value("KIMIK3_HOST_LOCK", os.environ, HOST_LOCK_DEFAULT)


def _forget_if_held_by(current: LockHolder | None, holder: LockHolder, forget: Callable[[], None]) -> None:
    """`forget()` the lock record `current` when it is `holder`'s. After a force-unlock the record may be the next
    holder's: that one is left alone."""
    if current is not None and current.id == holder.id:
        forget()


class HostWideLock:
    """flock on one file for the whole host; the holder's JSON is the file's content (written through the
    locked descriptor, so it needs no second file). The file is made LOCK_FILE_MODE (0644), owned by its creator:
    every user locks the same one, only the creator writes its record."""

    def __init__(self, path: Path):
        self.path = path
        self._fd: int | None = None

    def try_acquire(self, holder: LockHolder) -> tuple[bool, LockHolder | None]:
        """(acquired, the record found: a dead holder's when acquired, the holder's when not). OSError: unusable."""
        fd = _flock(self.path, self._open)
        if fd is None:
            return False, self._settled()
        self._fd = fd
        stale = self._record()
        self._write(holder.to_json())
        return True, stale

    def release(self, holder: LockHolder) -> None:
        if self._fd is None:
            return
        try:
            _forget_if_held_by(self._record(), holder, lambda: self._write(None))
        finally:
            fd, self._fd = self._fd, None
            os.close(fd)

    def holder(self) -> tuple[LockHolder | None, bool]:
        return self._record(), _flocked(self.path)

    def break_lock(self) -> None:
        # Only a lock file kimik3 may own is removed: KIMIK3_HOST_LOCK naming another file (/etc/passwd) must not
        # make force-unlock delete it, nor a symlink planted there make it touch anything.
        try:
            fd = open_lock_file(self.path, os.O_RDONLY)
        except OSError:  # absent, a symlink, a hard link, a FIFO: nothing of kimik3's to remove
            return
        try:
            if not _holds_a_lock_record(fd):
                return
        finally:
            os.close(fd)
        try:
            self.path.unlink(missing_ok=True)
        except PermissionError:  # another user's file in sticky /run/lock: empty the record at least
            try:
                fd = open_lock_file(self.path, os.O_RDWR)
            except OSError:
                return
            try:
                if _holds_a_lock_record(fd):
                    os.ftruncate(fd, 0)
            finally:
                os.close(fd)

    def _open(self) -> int:
        try:
            return self._open_existing()
        except FileNotFoundError:
            pass
        try:
            fd = open_lock_file(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, LOCK_FILE_MODE)
        except FileExistsError:  # made by another kimik3 just now
            return self._open_existing()
        os.fchmod(fd, LOCK_FILE_MODE)  # past the umask: a 0600 file would leave other users' kimik3s unlocked
        return fd

    def _open_existing(self) -> int:
        """The file as it is; set to LOCK_FILE_MODE when it is this user's and world-writable (an older kimik3 made
        it 0666). Another user's file is used as it is, read-only when that is all its mode allows. Only a plain
        lock file of its own (open_lock_file) holding a lock record or nothing: the record write truncates it and
        the mode is set on it, so a symlink or a path set by mistake must never reach either."""
        try:  # no O_CREAT: protected_regular refuses it on another user's file in /run/lock
            fd = open_lock_file(self.path, os.O_RDWR)
        except PermissionError:  # locking needs no write access: the record then stays unwritten
            return open_lock_file(self.path, os.O_RDONLY)
        if not _holds_a_lock_record(fd):
            os.close(fd)
            raise OSError(
                errno.EINVAL,
                "it holds something other than a kimik3 lock record; kimik3 leaves it as it is",
                str(self.path),
            )
        try:
            info = os.fstat(fd)
            # Only a file others may write (an older kimik3's 0666) is narrowed: an operator's own 0664 lock file
            # in a group folder keeps its group write.
            if info.st_uid == os.geteuid() and info.st_mode & 0o002:
                os.fchmod(fd, LOCK_FILE_MODE)
        except OSError:  # a filesystem without modes: the lock works without it
            pass
        return fd

    def _write(self, record: dict | None) -> None:
        data = json.dumps(record).encode() if record else b""
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, data, 0)
        except OSError:  # opened read-only: the lock holds, the record names nobody
            pass

    def _record(self) -> LockHolder | None:
        try:  # not through a symlink, never blocking on a FIFO: only a lock file of its own names a holder
            fd = open_lock_file(self.path, os.O_RDONLY)
        except OSError:
            return None
        try:
            data = json.loads(os.pread(fd, _RECORD_MAX + 1, 0) or b"null")
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)
        return LockHolder.from_json(data) if isinstance(data, dict) else None

    def _settled(self) -> LockHolder | None:
        deadline = time.monotonic() + _SETTLE_S
        while True:
            record = self._record()
            if record is not None or time.monotonic() >= deadline:
                return record
            time.sleep(_SETTLE_STEP_S)


class StateDirLock:
    """One process holds at most one lock at a time through one of these. `host_lock`: the host-wide file
    taken with the state dir's (None: the state dir's alone, as unit tests on temp dirs use it)."""

    def __init__(self, state_dir: Path, host_lock: Path | None = None):
        self.path = state_dir / LOCK_FILE
        self.records = StateFiles(state_dir)
        self._fd: int | None = None
        self.host = HostWideLock(host_lock) if host_lock is not None else None

    def try_acquire(self, holder: LockHolder) -> LockAttempt:
        # Nested locking in one process would deadlock a waiter forever (it is our own flock): a bug.
        if self._fd is not None:
            raise RuntimeError("the host lock is already held by this process")
        fd = self._flock()
        if fd is None:
            return LockAttempt(acquired=False, holder=self._settled_holder())
        self._fd = fd
        stale = self._record()
        note = None
        if self.host is not None:
            try:
                taken, found = self.host.try_acquire(holder)
            except OSError as exc:
                taken, found = True, None
                note = (
                    f"cannot use the host-wide lock {self.host.path} ({exc.strerror or exc}): only the state "
                    f"dir's lock ({self.path}) keeps other kimik3s out; set KIMIK3_HOST_LOCK to a writable path"
                )
            if not taken:  # another state dir's kimik3 is changing this host: let go of ours, name it
                self._fd = None
                os.close(fd)
                return LockAttempt(acquired=False, holder=found)
            stale = stale or found
        unrecorded = None
        try:
            self.records.write(LOCK_RECORD, holder.to_json())
        except OSError as exc:
            # A full or read-only state dir (issue 30). The flock is what keeps others out; the record only names
            # the holder. Raising here kept the flock held with nobody to release it: a reconcile loop then refused
            # itself ("already held by this process") every pass, even after the disk was freed. The apply goes
            # on: its room check refuses before anything is stopped, and a stopped server can still be started.
            unrecorded = f"{exc.filename or self.records.root / LOCK_RECORD}: {exc.strerror or exc}"
        return LockAttempt(acquired=True, holder=stale, note=note, unrecorded=unrecorded)

    def release(self, holder: LockHolder) -> None:
        if self._fd is None:
            return
        try:
            _forget_if_held_by(self._record(), holder, lambda: self.records.delete(LOCK_RECORD))
        finally:
            try:
                if self.host is not None:
                    self.host.release(holder)
            finally:
                fd, self._fd = self._fd, None
                os.close(fd)  # closing the descriptor drops the flock

    def holder(self) -> tuple[LockHolder | None, bool]:
        """The record and whether a live process holds the flock, read from /proc/locks: trying the lock,
        even for an instant, could make an apply starting in that instant fail with exit 5. The state dir's
        holder first; else the host-wide lock's (a kimik3 of another state dir)."""
        mine = (self._record(), self._flocked())
        if mine[1] or self.host is None:
            return mine
        other = self.host.holder()
        return other if other[1] else mine

    def break_lock(self) -> None:
        """force-unlock: remove the record, then the file; a holder still running keeps a flock on a
        removed inode, which excludes nobody (acquirers check the inode, see `_flock`). The host-wide file
        goes too when its record is the same lock (or names nobody)."""
        record = self._record()
        self.records.delete(LOCK_RECORD)
        self.path.unlink(missing_ok=True)
        if self.host is not None:
            other = self.host.holder()[0]
            if other is None or record is None or other.id == record.id:
                self.host.break_lock()

    def alive(self, holder: LockHolder) -> bool | None:
        return process_alive(holder)

    def _flock(self) -> int | None:
        """A descriptor holding the flock on the file now at `path`, or None when another process holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return _flock(self.path, lambda: open_lock_file(self.path, os.O_RDWR | os.O_CREAT, 0o644))
        except OSError as exc:  # e.g. ENOLCK on a filesystem without locks: say where, do not run unlocked
            raise StepError(
                f"cannot lock {self.path}: {exc.strerror} (keep the state dir on a local filesystem)"
            ) from exc

    def _flocked(self) -> bool:
        return _flocked(self.path)

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


_RECORD_MAX = 4096  # a lock record is ~200 bytes of JSON


def open_lock_file(path: Path, flags: int, mode: int = 0o666) -> int:
    """A descriptor on the lock file at `path`, which must be a plain file of its own: never through a symlink, a
    hard link, a FIFO or a device. The host-wide lock lives in world-writable /run/lock (and KIMIK3_HOST_LOCK may
    name any path): the holder's record is written by truncating the file, so a symlink planted there (or a path
    set by mistake) must not make kimik3 truncate what it points at. Found by the held-back review: a
    KIMIK3_HOST_LOCK symlink to /etc/passwd left /etc/passwd empty after one apply."""
    # O_NONBLOCK: opening a FIFO must not hang (it is refused below); no effect on a regular file's reads and writes.
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
        os.close(fd)
        raise OSError(
            errno.EINVAL,
            "not a plain file of its own (a hard link, a FIFO or a device): kimik3 leaves it as it is",
            str(path),
        )
    return fd


# How every record kimik3 writes begins (json.dumps of LockHolder.to_json(): `id` is its first field).
_RECORD_START = b'{"id": "'


def _holds_a_lock_record(fd: int) -> bool:
    """Empty, a lock record, or the start of one (a write torn by a crash): what kimik3 may truncate or remove.
    Any other content is someone else's file, however small or JSON-like (a KIMIK3_HOST_LOCK set by mistake to
    ~/.docker/config.json was emptied by an apply and removed by force-unlock while "starts with {" was the test)."""
    head = os.pread(fd, _RECORD_MAX + 1, 0)
    text = head.strip()
    if not text:
        return True
    if len(head) > _RECORD_MAX:
        return False
    try:
        data = json.loads(text)
    except ValueError:  # torn: a prefix of what kimik3 writes, or longer and cut short
        return text.startswith(_RECORD_START) or _RECORD_START.startswith(text)
    return isinstance(data, dict) and LockHolder.from_json(data) is not None


def _flock(path: Path, open_fd) -> int | None:  # noqa: ANN001 - () -> int
    """A descriptor holding the flock on the file now at `path`, or None when another process holds it."""
    while True:
        fd = open_fd()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except OSError:
            os.close(fd)
            raise
        # force-unlock may have removed the file between open and flock: a lock on a removed inode
        # excludes nobody, so start again on the file that is there now.
        try:
            current = os.stat(path)
        except FileNotFoundError:
            current = None
        if current is not None and os.path.samestat(os.fstat(fd), current):
            return fd
        os.close(fd)


def _flocked(path: Path) -> bool:
    """Whether a live process holds a flock on `path`, from /proc/locks (never by trying the lock)."""
    try:
        stat = os.stat(path)
    except (FileNotFoundError, PermissionError):  # no lock file: nobody ever locked here
        return False
    try:
        table = Path("/proc/locks").read_text()
    except OSError:  # no procfs: try the lock after all (released at once)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
        finally:
            os.close(fd)
        return False
    # A line per lock: "1: FLOCK  ADVISORY  WRITE <pid> <major>:<minor>:<inode> 0 EOF" (hex device).
    file_id = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    return any(len(f) > 5 and f[1] == "FLOCK" and f[5] == file_id for f in map(str.split, table.splitlines()))


def process_alive(holder: LockHolder) -> bool | None:
    """Whether a lock holder's process runs; None for a holder on another host (its pid means nothing here)."""
    if holder.host != socket.gethostname():
        return None
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True
