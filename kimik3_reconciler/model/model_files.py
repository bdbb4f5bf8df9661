"""Which hub paths a profile needs, and the state key of their verified manifest (pure)."""

from __future__ import annotations

from typing import Any

from kimik3_reconciler.model.facts import RemoteFile
from kimik3_reconciler.model.profile import Profile


def wanted_paths(profile: Profile) -> tuple[str, ...]:
    """The quant folder, plus the vision projector when the build can use it (fork only)."""
    paths = [profile.model.quant]
    if profile.build.source == "fork" and profile.model.mmproj:
        paths.append(profile.model.mmproj)
    return tuple(paths)


def manifest_key(profile: Profile) -> str:
    m = profile.model
    return f"models/{m.repo.replace('/', '--')}/{m.revision}/{'+'.join(wanted_paths(profile))}.json"


def manifest_record(files: tuple[RemoteFile, ...]) -> dict[str, Any]:
    return {"files": [f.model_dump() for f in files], "verified": [f.path for f in files]}


def parse_manifest(record: dict[str, Any]) -> tuple[tuple[RemoteFile, ...], frozenset[str]]:
    files = tuple(RemoteFile(**f) for f in record.get("files", ()))
    return files, frozenset(record.get("verified", ()))


# Seed 000: the tokenizer repo is cached for its small non-weight files only.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".ckpt", ".onnx", ".h5", ".msgpack")


def is_weight(path: str) -> bool:
    return path.lower().endswith(WEIGHT_SUFFIXES)


def tokenizer_manifest_key(profile: Profile) -> str:
    t = profile.model.tokenizer
    assert t is not None
    return f"models/{t.repo.replace('/', '--')}/{t.revision}/non-weight-files.json"
