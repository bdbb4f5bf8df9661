"""MemoryState (the state dir's records and artifacts), MemoryCache (the cache dir's entries) and FakeClock (time
that moves only when slept); full_for (a state dir full for some records)."""

from __future__ import annotations

import datetime
import errno
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kimik3_reconciler.model.state_room import StateRoom

BLOCK = 4096


class MemoryState:
    """Records in memory; artifacts are files under a real temporary root. `free`: bytes the state dir has left
    (None: no limit), spent by records in 4 KiB blocks; a write that does not fit raises ENOSPC as the disk does."""

    def __init__(self, root: Path | None = None) -> None:
        self.records: dict[str, dict[str, Any]] = {}
        self.root = root
        self.free: int | None = None
        self.refused: list[str] = []  # keys whose write found no room

    def read(self, key: str) -> dict[str, Any] | None:
        return self.records.get(key)

    def write(self, key: str, value: dict[str, Any]) -> None:
        if self.free is not None:
            new, old = _blocks(value), _blocks(self.records.get(key))
            if new > self.free:  # the new file is written whole before the rename frees the old one
                self.refused.append(key)
                raise OSError(errno.ENOSPC, "No space left on device", f"state/{key}")
            self.free += old - new
        self.records[key] = value

    def delete(self, key: str) -> None:
        if self.free is not None:
            self.free += _blocks(self.records.get(key))
        self.records.pop(key, None)

    def room(self) -> StateRoom | None:
        return None if self.free is None else StateRoom("state", self.free, BLOCK)

    def _file(self, key: str) -> Path:
        if self.root is None:
            raise AssertionError("this test keeps no files")
        return self.root / key

    def artifact(self, key: str) -> Path | None:
        path = self._file(key)
        return path if path.exists() else None

    def produce(self, key: str, make: Callable[[Path], None]) -> Path:
        path = self._file(key)
        if path.exists():
            return path  # as the real adapter: made once per key
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(path.name + ".partial")
        try:
            make(staging)
            staging.rename(path)
        finally:
            shutil.rmtree(staging, ignore_errors=True) if staging.is_dir() else staging.unlink(missing_ok=True)
        return path

    def discard(self, key: str) -> None:
        path = self._file(key)
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


def _blocks(value: dict[str, Any] | None) -> int:
    return 0 if value is None else -(-len(json.dumps(value, indent=1, sort_keys=True)) // BLOCK) * BLOCK


class MemoryCache:
    """The cache port (ports.CachePort) in memory: entries by key, apart from the state's records."""

    def __init__(self) -> None:
        self.entries: dict[str, dict[str, Any]] = {}

    def read(self, key: str) -> dict[str, Any] | None:
        return self.entries.get(key)

    def write(self, key: str, value: dict[str, Any]) -> None:
        self.entries[key] = value


def full_for(state: Any, prefix: str) -> None:  # noqa: ANN401 - any state port
    """`state`'s writes of records under `prefix` fail as on a full state dir (ENOSPC); the others go through."""
    real_write = state.write

    def write(key: str, value: dict[str, Any]) -> None:
        if key.startswith(prefix):
            raise OSError(errno.ENOSPC, "No space left on device", f"state/{key}")
        real_write(key, value)

    state.write = write


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds

    def now(self) -> datetime.datetime:
        return datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(seconds=self.t)
