"""kimik3's cache directory: values derived from content kimik3 re-reads whenever their key moves (the profile
cache's validations, a source archive's sha256 by stat). Apart from the state dir, so `plan` never creates or
writes the state dir (issue 13): KIMIK3_CACHE_DIR, else $XDG_CACHE_HOME/kimik3, else ~/.cache/kimik3.

A cache only costs speed: an entry that does not read back (torn, foreign, another format) is absent, and a
cache dir that is missing and cannot be made, read-only or full means nothing is kept (never an error)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from kimik3_reconciler.adapters import atomic_files
from kimik3_reconciler.model.env_knobs import knob_value


def cache_dir() -> Path | None:
    """Where kimik3 keeps its caches (None: no home to put them in, so nothing is cached)."""
    explicit = knob_value("KIMIK3_CACHE_DIR", os.environ)
    if explicit is not None:
        return explicit
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):  # the XDG spec: a relative path is invalid and is ignored
        return Path(xdg) / "kimik3"
    try:
        return Path.home() / ".cache" / "kimik3"
    except RuntimeError:  # no HOME and no passwd entry (a bare container's uid)
        return None


def write_atomically(path: Path, text: str) -> bool:
    """`text` at `path`, whole or not at all (adapters/atomic_files.py). False when it could not be written:
    the caller's cache just misses next time."""
    try:
        atomic_files.write_atomically(path, text)
        return True
    except OSError:
        return False  # read-only, full, not a folder, no permission: nothing is cached


class CacheFiles:
    """The cache port (ports.CachePort): JSON entries by relative key under the cache dir (None: no cache)."""

    def __init__(self, root: Path | None):
        self.root = root

    def read(self, key: str) -> dict[str, Any] | None:
        if self.root is None:
            return None
        try:
            value = json.loads((self.root / key).read_bytes())
        # Absent, unreadable, torn or not JSON: a miss (the caller recomputes and replaces it).
        except (OSError, ValueError, RecursionError):
            return None
        return value if isinstance(value, dict) else None

    def write(self, key: str, value: dict[str, Any]) -> None:
        if self.root is not None:
            write_atomically(self.root / key, json.dumps(value))
