"""The profile cache: validations kept in the state dir, so a plan of a profile validated before builds its
values without importing pydantic or yaml (docs/design.md "What a no-op plan imports").

- Key: sha256 of the profile text and of what decides its validation: the bytes of kimik3's model package
  and errors module (a development checkout changes without a version bump) and of the installed pydantic's
  and PyYAML's version files. Same key, same validation: an entry is never stale, whatever the file's mtime.
- An entry is `cache/profiles/<key>.json` (model/loaded_profile.to_entry plus its key and a digest of its
  content), written atomically (a unique temp file renamed into place), so concurrent runs may write the
  same entry. One that does not read back whole (torn, edited, another format) is ignored and replaced.
- Only valid profiles are kept: a profile that fails validation fails again, each problem located by line.
  The source is not kept (the same text read under another name names that file in its warnings).
- It keeps the newest 64 entries; a state dir it cannot write only means the next run validates again.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from functools import cache
from pathlib import Path
from typing import Any

from kimik3_reconciler.model.loaded_profile import LoadedProfile, from_entry, to_entry

FORMAT = "kimik3-profile-cache/1"
KEEP = 64
_PACKAGE = Path(__file__).resolve().parents[1]


@cache
def code_identity() -> bytes | None:
    """What decides a validation besides the text (None: not found, so nothing is cached)."""
    digest = hashlib.sha256(FORMAT.encode())
    try:
        for path in [*sorted((_PACKAGE / "model").glob("*.py")), _PACKAGE / "errors.py"]:
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        for package, version_file in (("pydantic", "version.py"), ("yaml", "__init__.py")):
            spec = importlib.util.find_spec(package)  # finds the package without importing it
            if spec is None or not spec.submodule_search_locations:
                return None
            digest.update(Path(next(iter(spec.submodule_search_locations)), version_file).read_bytes())
    except (OSError, ImportError, ValueError):
        return None
    return digest.digest()


def entry_path(state_dir: Path, key: str) -> Path:
    return state_dir / "cache" / "profiles" / f"{key}.json"


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
    import tempfile  # a cache miss only

    entry = {**entry, "digest": _digest(entry)}
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem[:16]}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(entry))
        os.replace(tmp, path)
        tmp = None
        _prune(path.parent)
    except OSError:
        pass  # read-only or full state dir: nothing is cached, the next run validates again
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def _prune(folder: Path) -> None:
    entries = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime_ns if p.exists() else 0)
    for old in entries[:-KEEP]:
        old.unlink(missing_ok=True)  # another run may prune the same one


def load(state_dir: Path, text: str, source: str) -> LoadedProfile:
    """The validated profile of `text`, read as `source`: from the cache, else validated (and kept)."""
    from_cache = None
    key = cache_key(text)
    if key is not None:
        from_cache = _read(entry_path(state_dir, key), key, text, source)
    if from_cache is not None:
        return from_cache
    from kimik3_reconciler.model.profile_source import parse_profile  # pydantic and yaml: a miss only

    loaded = parse_profile(text, source=source)  # a ProfileError leaves the cache as it was
    if key is not None:
        _store(entry_path(state_dir, key), {"format": FORMAT, "key": key, **to_entry(loaded)})
    return loaded
