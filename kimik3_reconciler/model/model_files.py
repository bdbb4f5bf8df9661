"""Which hub paths a profile needs, and the state key and shape of their verified manifest (pure).

The manifest records, per file, what the hub listed (size, sha256) and the stat fingerprint the
file had when its bytes were verified (`stats`): a later plan re-hashes exactly the files whose
stat moved since. There is one manifest per cache dir (`cache_dir` in the record, its hash in the
key). Manifests written before stats existed have none, and those written before locations one per
quant (see observe/model_cache.py).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from kimik3_reconciler.model.facts import FileStat, ModelFact, RemoteFile
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.record_shape import conforms, typed
from kimik3_reconciler.model.records import layout_key, local_layout_key


def wanted_paths(profile: Profile) -> tuple[str, ...]:
    """The quant folder, plus the vision projector when the build can use it (fork only)."""
    paths = [profile.model.quant]
    if profile.build.source == "fork" and profile.model.mmproj:
        paths.append(profile.model.mmproj)
    return tuple(paths)


def _located(key: str, cache_dir: str) -> str:
    """`key` (ending .json) for the files under `cache_dir`: the cache dir's sha256 goes in the name (a path has
    '/', a state key's parts are names; the record holds the path itself)."""
    return f"{key.removesuffix('.json')}@{hashlib.sha256(cache_dir.encode()).hexdigest()[:16]}.json"


def manifest_key_before_locations(profile: Profile) -> str:
    """Where kimik3 kept one manifest per repo/revision/quant for whatever cache dir it was verified in: read
    (never written) when a cache dir has no manifest of its own yet; its stats still say which files it verified."""
    m = profile.model
    return f"models/{m.repo.replace('/', '--')}/{m.revision}/{'+'.join(wanted_paths(profile))}.json"


def manifest_key(profile: Profile, cache_dir: str) -> str:
    """The verified manifest of the profile's quant in `cache_dir` (absolute): one per location, so two profiles
    (or two checkouts of one GitOps repo) with other cache dirs each keep theirs verified and switching between
    them re-hashes nothing (issue 30: each switch re-hashed every file, ~9 min on 800 GB)."""
    return _located(manifest_key_before_locations(profile), cache_dir)


def manifest_record(
    files: tuple[RemoteFile, ...], stats: tuple[FileStat, ...] = (), cache_dir: str | None = None
) -> dict[str, Any]:
    record = {
        "files": [f.model_dump() for f in files],
        "verified": [f.path for f in files],
        "stats": {s.path: s.model_dump(exclude={"path"}) for s in stats},
    }
    return record if cache_dir is None else {**record, "cache_dir": cache_dir}


def file_stat(path: str, stat: os.stat_result) -> FileStat:
    """The stat fingerprint of a file (its blob: the snapshot link is followed)."""
    return FileStat(
        path=path, size=stat.st_size, mtime_ns=stat.st_mtime_ns, ctime_ns=stat.st_ctime_ns, inode=stat.st_ino
    )


def manifest_readable(record: Any, cache_dir: str | None = None) -> bool:
    """Is `record` a manifest of this shape (of `cache_dir`, when given)? A torn, hand-edited or other-version one
    counts as absent: the model step lists the files at the hub and re-verifies them (model/record_shape.py says
    why); so does one naming another cache dir (copied by hand to this location's key)."""
    if not isinstance(record, dict) or not conforms(record.get("verified", []), list[str]):
        return False
    if cache_dir is not None and record.get("cache_dir") != cache_dir:
        return False
    files, stats = record.get("files", []), record.get("stats", {})
    # No quant or tokenizer repo has zero files: an empty list is an edit, and would read as "nothing to fetch".
    return (
        isinstance(files, list)
        and bool(files)
        and all(typed(RemoteFile, f) is not None for f in files)
        and isinstance(stats, dict)
        and all(isinstance(s, dict) and typed(FileStat, {**s, "path": p}) is not None for p, s in stats.items())
    )


def parse_manifest(record: dict[str, Any]) -> tuple[tuple[RemoteFile, ...], frozenset[str]]:
    files = tuple(RemoteFile(**f) for f in record.get("files", ()))
    return files, frozenset(record.get("verified", ()))


def recorded_stats(record: dict[str, Any]) -> dict[str, FileStat] | None:
    """{path: the stat fingerprint recorded when it was verified}; None for a manifest older than stats."""
    if "stats" not in record:
        return None
    return {path: FileStat(path=path, **stat) for path, stat in record["stats"].items()}


# Seed 000: the tokenizer repo is cached for its small non-weight files only.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".ckpt", ".onnx", ".h5", ".msgpack")


def is_weight(path: str) -> bool:
    return path.lower().endswith(WEIGHT_SUFFIXES)


# A safetensors checkpoint (vLLM, SGLang: ModelSource.format "safetensors") as its server opens it: the weights, their
# index, the model and generation config, the tokenizer (tokenizer.json / .model / tiktoken, its config, chat
# template) and the remote code a `trust_remote_code` model imports (Kimi's configuration_*.py, tokenization_*.py).
CHECKPOINT = "checkpoint"  # ModelFact.quant of a checkpoint: the plan's target reads repo@revision/checkpoint
CHECKPOINT_SUFFIXES = (".safetensors", ".json", ".py", ".model", ".tiktoken", ".jinja", ".txt")


def checkpoint_file(path: str) -> bool:
    """Does the server need `path` of a checkpoint repo? Top-level files only (a repo's `original/` or
    `figures/` folders are other formats and pictures), of the suffixes above: never other weight formats
    (.bin, .gguf, .pt: the same weights again), never README/LICENSE/images."""
    return "/" not in path and path.lower().endswith(CHECKPOINT_SUFFIXES)


def checkpoint_manifest_key(repo: str, revision: str, cache_dir: str) -> str:
    """The verified manifest of repo@revision's checkpoint files in `cache_dir` (one per location, as manifest_key)."""
    return _located(f"models/{repo.replace('/', '--')}/{revision}/{CHECKPOINT}.json", cache_dir)


def tokenizer_manifest_key_before_locations(profile: Profile) -> str:
    t = profile.model.tokenizer
    assert t is not None
    return f"models/{t.repo.replace('/', '--')}/{t.revision}/non-weight-files.json"


def tokenizer_manifest_key(profile: Profile, cache_dir: str) -> str:
    """As manifest_key, for model.tokenizer's non-weight files in `cache_dir`."""
    return _located(tokenizer_manifest_key_before_locations(profile), cache_dir)


def model_layout_key(model: ModelFact) -> str:
    """Where the layout of this quant is recorded: per repo@revision/quant; a local model's per content (its
    manifest's digest), so a changed file is read again."""
    if model.local_path is not None:
        return local_layout_key(model.digest)
    return layout_key(model.repo, model.revision, model.quant)
