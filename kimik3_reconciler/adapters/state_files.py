"""kimik3's state directory (JSON records, atomic writes) and the system clock."""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kimik3_reconciler.adapters.atomic_files import write_atomically
from kimik3_reconciler.model.state_room import StateRoom


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _plain(key: str) -> bool:
    """A relative path of plain names: under the root whatever it is joined to."""
    return not key.startswith("/") and all(part not in ("", ".", "..") for part in key.split("/"))


class StateFiles:
    def __init__(self, root: Path):
        self.root = root

    def _at(self, key: str) -> Path:
        """The file of `key`, always under the root. A key is made from names (a profile's, checked by its pattern)
        and digests; a key that is absolute or climbs out with '..' is refused, so that no caller can have `discard`
        remove (rmtree), or `write` replace, a path outside the state directory (`kimik3 metrics-serve ../..`
        read its record from outside it)."""
        if not _plain(key):
            raise ValueError(f"state key {key!r} is not a relative path of plain names")
        return self.root / key

    def _path(self, key: str) -> Path:
        path = self._at(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def read(self, key: str) -> dict[str, Any] | None:
        if not _plain(key):
            # Nothing is ever written there (write refuses it): no record. A key made of an empty field (the
            # exporter's gate key for a config without a quant) must read as absent, not fail the scrape.
            return None
        path = self._at(key)
        if not path.is_file():
            return None
        try:
            record = json.loads(path.read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None  # a torn record counts as absent: the step redoes (and re-verifies) its work
        # Every record kimik3 writes is a JSON object: a list or a number there (edited by hand, another tool)
        # counts as absent too, rather than reaching a reader that calls .get on it.
        return record if isinstance(record, dict) else None

    def write(self, key: str, value: dict[str, Any]) -> None:
        """Atomic and durable: a unique temp file, fsync, rename (concurrent applies never collide)."""
        write_atomically(self._path(key), json.dumps(value, indent=1, sort_keys=True), durable=True)

    def delete(self, key: str) -> None:
        self._at(key).unlink(missing_ok=True)

    def artifact(self, key: str) -> Path | None:
        if not _plain(key):
            return None  # as read: never produced there
        path = self._at(key)
        return path if path.exists() else None

    def produce(self, key: str, make: Callable[[Path], None]) -> Path:
        path = self._path(key)
        # One producer per key at a time (two applies would compute the same hours-long reference
        # logits twice, or race to rename a folder): the kernel drops the lock if this process dies.
        with open(path.with_name(f".{path.name}.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if path.exists():
                return path  # made by the holder we waited for: keys are deterministic
            for leftover in path.parent.glob(f".{path.name}.*.partial"):
                _remove(leftover)  # of a killed producer (we hold the lock: nobody else is writing it)
            staging_dir = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial"))
            try:
                staging = staging_dir / path.name
                make(staging)
                if not staging.exists():
                    raise FileNotFoundError(f"{staging}: nothing was produced for {key}")
                os.replace(staging, path)  # atomic: the artifact appears whole (path is absent, see above)
            finally:
                _remove(staging_dir)
        return path

    def discard(self, key: str) -> None:
        _remove(self._at(key))

    def room(self) -> StateRoom | None:
        where = self.root
        while not where.exists() and where != where.parent:  # a first apply: the dir is made by its first write
            where = where.parent
        try:
            fs = os.statvfs(where)
        except OSError:
            return None  # the writes themselves will name the problem
        # f_files 0: no inode limit (btrfs, a tmpfs with nr_inodes=0).
        return StateRoom(str(self.root), fs.f_bavail * fs.f_frsize, fs.f_frsize, fs.f_favail if fs.f_files else None)


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
