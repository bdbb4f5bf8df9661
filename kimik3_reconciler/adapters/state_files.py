"""kimik3's state directory (JSON records, atomic writes) and the system clock."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


class StateFiles:
    def __init__(self, root: Path):
        self.root = root

    def _path(self, key: str) -> Path:
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def read(self, key: str) -> dict[str, Any] | None:
        path = self.root / key
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:
            return None  # a torn record counts as absent: the step redoes (and re-verifies) its work

    def write(self, key: str, value: dict[str, Any]) -> None:
        """Atomic and durable: a unique temp file, fsync, rename (concurrent applies never collide)."""
        path = self._path(key)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(value, indent=1, sort_keys=True))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def delete(self, key: str) -> None:
        (self.root / key).unlink(missing_ok=True)

    def artifact(self, key: str) -> Path | None:
        path = self.root / key
        return path if path.exists() else None

    def produce(self, key: str, make: Callable[[Path], None]) -> Path:
        path = self._path(key)
        # Unique per process: two applies producing the same artifact never write into each other's staging.
        staging = path.with_name(f"{path.name}.{os.getpid()}.partial")
        _remove(staging)  # a leftover of an interrupted run of this pid
        try:
            make(staging)
            if not staging.exists():
                raise FileNotFoundError(f"{staging}: nothing was produced for {key}")
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)  # os.replace cannot replace a non-empty folder
            os.replace(staging, path)
        except BaseException:
            _remove(staging)
            raise
        return path

    def discard(self, key: str) -> None:
        _remove(self.root / key)


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.timezone.utc)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
