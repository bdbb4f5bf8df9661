"""kimik3's state directory (JSON records, atomic writes) and the system clock."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any


class StateFiles:
    def __init__(self, root: Path):
        self.root = root

    def path(self, key: str) -> Path:
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
        path = self.path(key)
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


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
