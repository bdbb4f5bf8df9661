"""The model in the HF cache: which files of repo@revision the profile needs, and which are verified.

A no-op plan must not touch the network or re-hash hundreds of GB: after a verified download
the step records a manifest (paths, sizes, sha256, and each file's stat fingerprint) in kimik3's
state, one per cache dir; observing then costs one `try_to_load_from_cache` and one stat per file.
Without a manifest the hub's tree listing at the pinned revision says what is needed (and how big it is).
Re-hashing goes through `HostPort.file_digest`.

No corrupt shard is served (docs/operations.md): a file whose stat fingerprint (size, mtime, ctime,
inode) moved since it was verified is re-hashed here, every plan, until the model step records the
new fingerprint (sha256 matches) or refetches it (mismatch: `corrupt`). `--verify` re-hashes all.
A manifest from before stat fingerprints is trusted as it was (verified at download, size-checked
since) and its fingerprints are recorded by the next apply.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kimik3_reconciler.errors import DownloadFailed, TransientError
from kimik3_reconciler.model.facts import FileStat, ModelFact, RemoteFile
from kimik3_reconciler.model.model_files import (
    CHECKPOINT,
    checkpoint_file,
    checkpoint_manifest_key,
    file_stat,
    is_weight,
    manifest_key,
    manifest_key_before_locations,
    manifest_readable,
    parse_manifest,
    recorded_stats,
    tokenizer_manifest_key,
    tokenizer_manifest_key_before_locations,
    wanted_paths,
)
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.observe.host import collect_filesystem
from kimik3_reconciler.ports import HostPort, HubPort, StatePort


def model_cache_dir(profile: Profile, hub: HubPort, base_dir: Path) -> str:
    # A relative cache_dir is relative to the profile file, like every other path in it.
    m = profile.model
    return str((base_dir / m.cache_dir).resolve()) if m.cache_dir else hub.default_cache_dir()


def content_matches(cached: Path, f: RemoteFile, host: HostPort) -> bool:
    """Re-hash: sha256 for LFS files, the git blob sha1 for plain git files (the hub's two ids)."""
    if f.sha256:
        return host.file_digest(str(cached), "sha256") == f.sha256
    if not f.git_oid:
        return True  # nothing to compare with (the download refuses such a file anyway)
    return host.file_digest(str(cached), "sha1", f"blob {f.size}\0".encode()) == f.git_oid


def _check_files(
    files: tuple[RemoteFile, ...],
    verified: frozenset[str],
    recorded: dict[str, FileStat] | None,
    repo: str,
    revision: str,
    cache_dir: str,
    hub: HubPort,
    host: HostPort,
    rehash: bool,
    stat_only: bool = False,
) -> dict[str, Any]:
    """ModelFact's cache fields: missing, corrupt, changed, stats (of the files verified now), unrecorded, in_blobs.
    `stat_only` (`kimik3 status`): a moved file is reported `changed`, never re-hashed (a 50 GB shard)."""
    found: dict[str, list[Any]] = {
        "missing": [],
        "corrupt": [],
        "changed": [],
        "stats": [],
        "unrecorded": [],
        "in_blobs": [],
    }
    for f in files:
        cached = hub.cached_file(repo, revision, f.path, cache_dir)
        stat = cached.stat() if cached is not None else None
        # Present = verified once (hash == the hub's) and still the recorded size; a truncated or
        # deleted blob is missing again and gets refetched, never served.
        if f.path not in verified or cached is None or stat is None or stat.st_size != f.size:
            found["missing"].append(f.path)
            # Its blob may still be cached (a snapshot link removed, a file another tool fetched): the download
            # re-hashes and links it without fetching, so the plan must not price its bytes. Size only here: the
            # hash is the download's (a 50 GB shard is not read by a plan).
            blob = hub.cached_blob(repo, f, cache_dir)
            if blob is not None and blob.stat().st_size == f.size:
                found["in_blobs"].append(f.path)
            continue
        now = file_stat(f.path, stat)
        then = recorded.get(f.path) if recorded is not None else None
        # An older manifest (no stats at all) is trusted as before; in a newer one a file without a
        # stat is one whose fingerprint could not be recorded (it moved during apply): re-hash it.
        moved = recorded is not None and then != now
        if moved:
            found["changed"].append(f.path)
            if stat_only:  # neither confirmed nor refuted: a plan re-hashes it
                continue
        # Re-hash what moved since it was verified (or everything, `--verify`): a bad blob is
        # refetched, never served; an older manifest without stats is trusted as before.
        if (moved or rehash) and not content_matches(cached, f, host):
            found["corrupt"].append(f.path)
            found["missing"].append(f.path)
            continue
        found["stats"].append(now)
        if then != now:
            found["unrecorded"].append(f.path)
    return {key: tuple(values) for key, values in found.items()}


def _manifest(state: StatePort, keys: tuple[str, str], cache_dir: str) -> dict[str, Any] | None:
    """This cache dir's manifest; else the one kept per quant before manifests were kept per location (still
    safe anywhere: its stats say which files it verified, and a file whose stat matches is that very file; any
    other is re-hashed once, then recorded under its own location); else None (listed at the hub, re-verified).
    A torn, foreign or other-location record counts as absent."""
    located, before = keys
    record = state.read(located)
    if record is not None and manifest_readable(record, cache_dir):
        return record
    record = state.read(before)
    return record if record is not None and manifest_readable(record) else None


def _collect(
    repo: str,
    revision: str,
    quant: str,
    keys: tuple[str, str],
    listing: Callable[[], list[RemoteFile]],
    cache_dir: str,
    hub: HubPort,
    state: StatePort,
    host: HostPort,
    rehash: bool,
    stat_only: bool = False,
) -> ModelFact:
    """The verified manifest when there is one, else the hub's listing; then what is missing locally."""
    record = _manifest(state, keys, cache_dir)
    if record is not None:
        files, verified = parse_manifest(record)
        recorded, source = recorded_stats(record), "manifest"
    else:
        try:
            files, verified, recorded, source = tuple(listing()), frozenset(), None, "hub"
        except (DownloadFailed, TransientError) as exc:
            # Kept as a fact: on a host the gate refuses anyway (no GPU, numa_balancing...), that
            # refusal is the more useful answer; otherwise the planner reports this error.
            return ModelFact(
                repo=repo,
                revision=revision,
                quant=quant,
                cache_dir=cache_dir,
                listing="hub",
                listing_error=str(exc),
                cache_free_bytes=host.disk_free(cache_dir),
                cache_fs=collect_filesystem(host, cache_dir),
            )
    checked = _check_files(files, verified, recorded, repo, revision, cache_dir, hub, host, rehash, stat_only)
    return ModelFact(
        repo=repo,
        revision=revision,
        quant=quant,
        cache_dir=cache_dir,
        files=files,
        **checked,
        listing=source,
        cache_free_bytes=host.disk_free(cache_dir),
        cache_fs=collect_filesystem(host, cache_dir),
    )


def collect_model(
    profile: Profile,
    hub: HubPort,
    state: StatePort,
    base_dir: Path,
    host: HostPort,
    rehash: bool = False,
    stat_only: bool = False,
) -> ModelFact:
    m = profile.model
    cache_dir = model_cache_dir(profile, hub, base_dir)
    return _collect(
        m.repo,
        m.revision,
        m.quant,
        (manifest_key(profile, cache_dir), manifest_key_before_locations(profile)),
        lambda: hub.list_files(m.repo, m.revision, wanted_paths(profile), m.endpoint),
        cache_dir,
        hub,
        state,
        host,
        rehash,
        stat_only,
    )


def collect_checkpoint(
    repo: str,
    revision: str,
    endpoint: str | None,
    cache_dir: str,
    hub: HubPort,
    state: StatePort,
    host: HostPort,
    rehash: bool = False,
    stat_only: bool = False,
) -> ModelFact:
    """A safetensors checkpoint (vLLM, SGLang): every file of repo@revision its server opens (model_files.
    checkpoint_file: weights, index, configs, tokenizer, remote code), verified like the GGUF shards: a manifest
    once verified, a stat per file after, the hub's listing (sha256 of LFS files, git oid of the rest) before."""

    def listing() -> list[RemoteFile]:
        files = [f for f in hub.list_repo(repo, revision, endpoint) if checkpoint_file(f.path)]
        if not any(f.path.endswith(".safetensors") for f in files):
            # A GGUF or PyTorch-only repo lists no weights vLLM/SGLang can open here: say so before anything is fetched.
            raise DownloadFailed(
                f"{repo}@{revision[:12]}: no *.safetensors at the top of the repository (model.repo "
                "must be a Hugging Face checkpoint in safetensors for this engine)"
            )
        return files

    key = checkpoint_manifest_key(repo, revision, cache_dir)
    return _collect(repo, revision, CHECKPOINT, (key, key), listing, cache_dir, hub, state, host, rehash, stat_only)


def collect_tokenizer(
    profile: Profile,
    hub: HubPort,
    state: StatePort,
    base_dir: Path,
    host: HostPort,
    rehash: bool = False,
    hub_down: str | None = None,
    stat_only: bool = False,
) -> ModelFact | None:
    """model.tokenizer: every non-weight file of the HF-format repo (the GGUF repo has no tokenizer)."""
    t = profile.model.tokenizer
    if t is None:
        return None

    def listing() -> list[RemoteFile]:
        if hub_down:  # the model listing just failed on this endpoint: don't wait for it twice
            raise TransientError(hub_down)
        return [f for f in hub.list_repo(t.repo, t.revision, profile.model.endpoint) if not is_weight(f.path)]

    cache_dir = model_cache_dir(profile, hub, base_dir)
    keys = (tokenizer_manifest_key(profile, cache_dir), tokenizer_manifest_key_before_locations(profile))
    return _collect(t.repo, t.revision, "tokenizer", keys, listing, cache_dir, hub, state, host, rehash, stat_only)
