"""A local model (`model.local_path`): a GGUF made or converted on this host (seed 000's REAP770 is one 697 GiB
file sliced out of UD-Q2_K_XL), served from where it is instead of the hub's quant folder.

What is served is what kimik3 verified: the first apply records a sha256 manifest of the files (state
`models/local/<path hash>.json`, the hub cache's manifest shape: files, sizes, sha256, stat fingerprints); a later
plan stats each file against it and re-hashes (`HostPort.file_digest`) only a file whose stat fingerprint moved, or
every file with `--verify`. A file whose content changed is drift: the model step records the new manifest and the
container's fingerprint (which carries the content's digest) relaunches the server on it. A plan writes no state: a
sha256 computed before the manifest records it is kept in the cache dir by stat fingerprint (as a local source
archive's is), so `plan` then `apply` hash a 697 GiB file once.

Bad input is refused here, naming `model.local_path` (exit 2, before anything changes): a path that does not exist,
or files the engine cannot serve (llama.cpp, engines/llamacpp/local_files.py: a file that is not a GGUF by its first
four bytes, a folder with no `.gguf` file or with a shard of a split missing).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.engines.base import WeightFilesRefused
from kimik3_reconciler.errors import InputError
from kimik3_reconciler.model.facts import FileStat, ModelFact, RemoteFile, manifest_digest
from kimik3_reconciler.model.model_files import file_stat, manifest_readable, parse_manifest, recorded_stats
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.records import file_hash_key, local_model_key
from kimik3_reconciler.observe.host import collect_filesystem
from kimik3_reconciler.ports import CachePort, HostPort, StatePort

FIELD = ("model", "local_path")
# Enough of a file's start for any engine's format to say whether it is one (GGUF: 4 bytes of magic).
_HEAD = 64


def _refuse(raw: str, why: str) -> InputError:
    return InputError(f"model.local_path: {raw} {why}", (FIELD,))


def _head(path: Path, raw: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(_HEAD)
    except OSError as exc:
        # An unreadable file is the profile's input, not kimik3's failure: name the field (exit 2).
        raise _refuse(raw, f"cannot be read: {path.name}: {exc.strerror or exc}") from None


def local_files(profile: Profile, base_dir: Path) -> tuple[Path, Path, list[Path]]:
    """(the resolved path, the folder holding the files, the files the engine serves), or InputError naming the
    field."""
    raw = profile.model.local_path
    assert raw is not None
    # model.local_path is a field of the engines that serve their own weight files (the rules refuse it elsewhere).
    reader = engine_for(profile.engine).weight_headers
    assert reader is not None, f"engine {profile.engine} reads no local_path"
    path = (base_dir / raw).resolve()  # relative to the profile file, like every path in it
    try:
        # rule: local-path-gguf
        # The engine names the files it serves and refuses what it cannot open (engines/<name>/: llama.cpp's GGUF).
        if path.is_file():
            folder, names = path.parent, reader.local_files([path.name], folder=False)
        elif path.is_dir():
            folder = path
            names = reader.local_files([p.name for p in path.iterdir() if p.is_file()], folder=True)
        else:
            what = "is not a regular file or folder" if path.exists() else "not found"
            raise _refuse(raw, f"{what} (resolved to {path})")
        files = [folder / name for name in names]
        for f in files:
            reader.check_start(f.name, _head(f, raw))
    except WeightFilesRefused as refused:
        raise _refuse(raw, str(refused)) from None
    return path, folder, files


def _digest(path: Path, stat: os.stat_result, host: HostPort, cache: CachePort | None, rehash: bool) -> str:
    """sha256 through HostPort.file_digest, kept in the cache dir by stat fingerprint (a plan writes no state):
    `plan` then `apply` read a 697 GiB file once. `rehash` (`--verify`) always reads."""
    key, fingerprint = file_hash_key(str(path)), stat_memo(stat)
    memo = None if rehash or cache is None else cache.read(key)
    if (
        memo
        and memo.get("path") == str(path)
        and memo.get("stat") == fingerprint
        and isinstance(memo.get("sha256"), str)
    ):
        return memo["sha256"]
    sha = host.file_digest(str(path), "sha256")
    if cache is not None and stat_memo(path.stat()) == fingerprint:  # not while it was being written
        cache.write(key, {"path": str(path), "stat": fingerprint, "sha256": sha})
    return sha


def stat_memo(st: os.stat_result) -> dict[str, int]:
    """What tells a file's content has not moved: size, mtime, ctime (no user can set it back), inode, device."""
    return {
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,
        "inode": st.st_ino,
        "device": st.st_dev,
    }


def collect_local_model(
    profile: Profile,
    state: StatePort,
    cache: CachePort | None,
    base_dir: Path,
    host: HostPort,
    rehash: bool = False,
    stat_only: bool = False,
) -> ModelFact:
    """The local model as a ModelFact: its files as `<quant>/<name>` with their sha256 now, `changed` (stat moved since
    recorded: re-hashed), `unrecorded` (to record), `recorded_digest` (the manifest's content). `stat_only`
    (`kimik3 status`): a moved file keeps its recorded sha256 and is reported `changed`, never hashed."""
    m = profile.model
    path, folder, files = local_files(profile, base_dir)
    record = state.read(local_model_key(str(path)))
    recorded: dict[str, FileStat] = {}
    then: dict[str, RemoteFile] = {}
    recorded_digest = None
    if record is not None and manifest_readable(record, str(path)):
        listed, _ = parse_manifest(record)
        then = {f.path: f for f in listed}
        recorded = recorded_stats(record) or {}
        recorded_digest = manifest_digest(listed, m.quant)
    found: dict[str, list[Any]] = {"files": [], "changed": [], "stats": [], "unrecorded": []}
    for f in files:
        name = f"{m.quant}/{f.relative_to(folder).as_posix()}"
        st = f.stat()
        now, before = file_stat(name, st), recorded.get(name)
        if before == now and name in then and then[name].sha256 and not rehash:
            sha = then[name].sha256  # unmoved since verified: not read (a 697 GiB file)
        elif stat_only:  # neither confirmed nor refuted: a plan hashes it
            sha = then[name].sha256 if name in then else None
            found["changed"].append(name)
        else:
            sha = _digest(f, st, host, cache, rehash)
            if before is not None and before != now:
                found["changed"].append(name)
        found["files"].append(RemoteFile(path=name, size=st.st_size, sha256=sha))
        found["stats"].append(now)
        if before != now or name not in then or then[name].sha256 != sha:
            found["unrecorded"].append(name)
    if set(then) - {f.path for f in found["files"]}:  # a shard removed from the folder: the manifest must follow
        found["unrecorded"] += sorted(set(then) - {f.path for f in found["files"]})
    return ModelFact(
        repo=m.repo,
        revision=m.revision,
        quant=m.quant,
        cache_dir=str(folder),
        local_path=str(path),
        recorded_digest=recorded_digest,
        listing="manifest",
        cache_free_bytes=host.disk_free(str(folder)),
        cache_fs=collect_filesystem(host, str(folder)),
        **{key: tuple(values) for key, values in found.items()},
    )
