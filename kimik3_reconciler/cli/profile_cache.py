"""The profile cache: validations kept in the cache dir (adapters/cache_files.py, never the state dir), so a plan of a profile validated before builds its
values without importing pydantic or yaml (docs/design.md "What a no-op plan imports").

- Key: sha256 of the profile text and of what decides its validation: the bytes of kimik3's model package
  and errors module (a development checkout changes without a version bump) and of the installed pydantic's
  and PyYAML's version files. Same key, same validation: an entry is never stale, whatever the file's mtime.
- An entry is `<cache dir>/profiles/<key>.json` (model/loaded_profile.to_entry plus its key and a digest of its
  content), written atomically (a unique temp file renamed into place), so concurrent runs may write the
  same entry. One that does not read back whole (torn, edited, another format) is ignored and replaced.
- Only valid profiles are kept: a profile that fails validation fails again, each problem located by line.
  The source is not kept (the same text read under another name names that file in its warnings).
- It keeps the newest 64 entries; a cache dir it cannot write (or none: no home) only means the next run
  validates again, never an error.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from functools import cache
from pathlib import Path
from typing import Any

from kimik3_reconciler.adapters.cache_files import write_atomically
from kimik3_reconciler.model.loaded_profile import LoadedProfile, from_entry, to_entry

FORMAT = "kimik3-profile-cache/1"
KEEP = 64
_PACKAGE = Path(__file__).resolve().parents[1]


@cache
def code_identity() -> bytes | None:
    """What decides a validation besides the text (None: not found, so nothing is cached)."""
    digest = hashlib.sha256(FORMAT.encode())
    # The interpreter too: validation uses the stdlib (ipaddress's is_private changed in 3.11.10/3.12.4), so a
    # venv upgraded in place must not be served a validation another Python made.
    digest.update(sys.version.encode() + b"\0")
    try:
        for path in [*sorted((_PACKAGE / "model").rglob("*.py")), _PACKAGE / "errors.py"]:
            digest.update(str(path.relative_to(_PACKAGE)).encode() + b"\0" + path.read_bytes() + b"\0")
        for package, version_file in (("pydantic", "version.py"), ("yaml", "__init__.py")):
            spec = importlib.util.find_spec(package)  # finds the package without importing it
            if spec is None or not spec.submodule_search_locations:
                return None
            digest.update(Path(next(iter(spec.submodule_search_locations)), version_file).read_bytes())
    except (OSError, ImportError, ValueError):
        return None
    return digest.digest()


def entry_path(cache_root: Path, key: str) -> Path:
    return cache_root / "profiles" / f"{key}.json"


def cache_key(text: str) -> str | None:
    identity = code_identity()
    return None if identity is None else hashlib.sha256(identity + text.encode("utf-8")).hexdigest()


def _digest(entry: dict[str, Any]) -> str:
    body = {k: v for k, v in entry.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _read(path: Path, key: str, text: str, source: str) -> LoadedProfile | None:
    try:
        entry = json.loads(path.read_bytes())
        if entry.get("format") != FORMAT or entry.get("key") != key or entry.get("digest") != _digest(entry):
            return None
        return from_entry(entry, text, source)
    except FileNotFoundError:
        return None
    # Torn, truncated, edited or from another format: validate again (and replace it).
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None


def _store(path: Path, entry: dict[str, Any]) -> None:
    entry = {**entry, "digest": _digest(entry)}
    if write_atomically(path, json.dumps(entry)):
        _prune(path.parent)


def _prune(folder: Path) -> None:
    def age(p: Path) -> int:
        try:
            return p.stat().st_mtime_ns
        except OSError:
            return 0  # another run pruned it meanwhile

    try:
        for old in sorted(folder.glob("*.json"), key=age)[:-KEEP]:
            old.unlink(missing_ok=True)  # another run may prune the same one
    except OSError:
        pass  # a folder we may write but not prune: it only grows


def load(cache_root: Path | None, text: str, source: str) -> LoadedProfile:
    """The validated profile of `text`, read as `source`: from the cache, else validated (and kept).
    `cache_root`: the cache dir (None: nothing is cached)."""
    from_cache = None
    key = None if cache_root is None else cache_key(text)
    if cache_root is not None and key is not None:
        from_cache = _read(entry_path(cache_root, key), key, text, source)
    if from_cache is not None:
        return from_cache
    from kimik3_reconciler.model.profile_source import parse_profile  # pydantic and yaml: a miss only

    loaded = parse_profile(text, source=source)  # a ProfileError leaves the cache as it was
    if cache_root is not None and key is not None:
        _store(entry_path(cache_root, key), {"format": FORMAT, "key": key, **to_entry(loaded)})
    return loaded
