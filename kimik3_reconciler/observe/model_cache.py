"""The model in the HF cache: which files of repo@revision the profile needs, and which are verified.

A no-op plan must not touch the network or re-hash hundreds of GB: after a verified download
the step records a manifest (paths, sizes, sha256) in kimik3's state; observing then costs one
`try_to_load_from_cache` and one stat per file. Without a manifest the hub's tree listing at the
pinned revision says what is needed (and how big it is).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kimik3_reconciler.errors import DownloadFailed, TransientError
from kimik3_reconciler.model.facts import ModelFact, RemoteFile
from kimik3_reconciler.model.model_files import (
    is_weight,
    manifest_key,
    parse_manifest,
    tokenizer_manifest_key,
    wanted_paths,
)
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.observe.local_inputs import sha256_file
from kimik3_reconciler.ports import HostPort, HubPort, StatePort


def _cache_dir(profile: Profile, hub: HubPort, base_dir: Path) -> str:
    # A relative cache_dir is relative to the profile file, like every other path in it.
    m = profile.model
    return str((base_dir / m.cache_dir).resolve()) if m.cache_dir else hub.default_cache_dir()


def _missing(files: tuple[RemoteFile, ...], verified: frozenset[str], repo: str, revision: str, cache_dir: str,
             hub: HubPort, rehash: bool) -> tuple[str, ...]:
    missing = []
    for f in files:
        cached = hub.cached_file(repo, revision, f.path, cache_dir)
        # Present = verified once (hash == the hub's) and still the recorded size; a truncated or
        # deleted blob is missing again and gets refetched, never served.
        if f.path not in verified or cached is None or cached.stat().st_size != f.size:
            missing.append(f.path)
        elif rehash and f.sha256 and sha256_file(cached) != f.sha256:
            missing.append(f.path)  # `--verify`: re-hash on demand; a bad blob is refetched, never served
    return tuple(missing)


def _collect(repo: str, revision: str, quant: str, key: str, listing: Callable[[], list[RemoteFile]],
             cache_dir: str, hub: HubPort, state: StatePort, host: HostPort, rehash: bool) -> ModelFact:
    """The verified manifest when there is one, else the hub's listing; then what is missing locally."""
    record = state.read(key)
    if record is not None:
        files, verified = parse_manifest(record)
        source = "manifest"
    else:
        try:
            files, verified, source = tuple(listing()), frozenset(), "hub"
        except (DownloadFailed, TransientError) as exc:
            # Kept as a fact: on a host the gate refuses anyway (no GPU, numa_balancing...), that
            # refusal is the more useful answer; otherwise the planner reports this error.
            return ModelFact(repo=repo, revision=revision, quant=quant, cache_dir=cache_dir, listing="hub",
                             listing_error=str(exc), cache_free_bytes=host.disk_free(cache_dir))
    return ModelFact(repo=repo, revision=revision, quant=quant, cache_dir=cache_dir, files=files,
                     missing=_missing(files, verified, repo, revision, cache_dir, hub, rehash), listing=source,
                     cache_free_bytes=host.disk_free(cache_dir))


def collect_model(profile: Profile, hub: HubPort, state: StatePort, base_dir: Path, host: HostPort,
                  rehash: bool = False) -> ModelFact:
    m = profile.model
    return _collect(m.repo, m.revision, m.quant, manifest_key(profile),
                    lambda: hub.list_files(m.repo, m.revision, wanted_paths(profile), m.endpoint),
                    _cache_dir(profile, hub, base_dir), hub, state, host, rehash)


def collect_tokenizer(profile: Profile, hub: HubPort, state: StatePort, base_dir: Path, host: HostPort,
                      rehash: bool = False, hub_down: str | None = None) -> ModelFact | None:
    """model.tokenizer: every non-weight file of the HF-format repo (the GGUF repo has no tokenizer)."""
    t = profile.model.tokenizer
    if t is None:
        return None

    def listing() -> list[RemoteFile]:
        if hub_down:  # the model listing just failed on this endpoint: don't wait for it twice
            raise TransientError(hub_down)
        return [f for f in hub.list_repo(t.repo, t.revision, profile.model.endpoint) if not is_weight(f.path)]

    return _collect(t.repo, t.revision, "tokenizer", tokenizer_manifest_key(profile), listing,
                    _cache_dir(profile, hub, base_dir), hub, state, host, rehash)
