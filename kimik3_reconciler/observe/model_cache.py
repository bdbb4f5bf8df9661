"""The model in the HF cache: which files of repo@revision the profile needs, and which are verified.

A no-op plan must not touch the network or re-hash hundreds of GB: after a verified download
the step records a manifest (paths, sizes, sha256) in kimik3's state; observing then costs one
`try_to_load_from_cache` and one stat per file. Without a manifest the hub's tree listing at the
pinned revision says what is needed (and how big it is).
"""

from __future__ import annotations

from pathlib import Path

from kimik3_reconciler.model.facts import ModelFact
from kimik3_reconciler.model.model_files import manifest_key, parse_manifest, wanted_paths
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.observe.local_inputs import sha256_file
from kimik3_reconciler.ports import HostPort, HubPort, StatePort


def collect_model(profile: Profile, hub: HubPort, state: StatePort, base_dir: Path, host: HostPort,
                  rehash: bool = False) -> ModelFact:
    m = profile.model
    # A relative cache_dir is relative to the profile file, like every other path in it.
    cache_dir = str((base_dir / m.cache_dir).resolve()) if m.cache_dir else hub.default_cache_dir()
    paths = wanted_paths(profile)
    record = state.read(manifest_key(profile))
    if record is not None:
        files, verified = parse_manifest(record)
        listing = "manifest"
    else:
        files, verified, listing = tuple(hub.list_files(m.repo, m.revision, paths, m.endpoint)), frozenset(), "hub"
    missing = []
    for f in files:
        cached = hub.cached_file(m.repo, m.revision, f.path, cache_dir)
        # Present = verified once (sha256 == LFS oid) and still the recorded size; a truncated or
        # deleted blob is missing again and gets refetched, never served.
        if f.path not in verified or cached is None or cached.stat().st_size != f.size:
            missing.append(f.path)
        elif rehash and f.sha256 and sha256_file(cached) != f.sha256:
            missing.append(f.path)  # `--verify`: re-hash on demand; a bad blob is refetched, never served
    return ModelFact(repo=m.repo, revision=m.revision, quant=m.quant, cache_dir=str(cache_dir),
                     files=files, missing=tuple(missing), listing=listing,
                     cache_free_bytes=host.disk_free(cache_dir))
