"""The model cache: download the missing files at the pinned revision (verified), record the manifest with
the files' stat fingerprints; or remove them."""

from __future__ import annotations

from pathlib import Path

from kimik3_reconciler.errors import DownloadFailed, InputError
from kimik3_reconciler.model.facts import FileStat
from kimik3_reconciler.model.model_files import file_stat, manifest_record
from kimik3_reconciler.model.specs import LocalModelVerify, ModelDownload, RemoveModelFiles
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.report import Reporter


def download_model(spec: ModelDownload, ports: Ports, reporter: Reporter) -> None:
    # The hub port verifies every file against the hub's sha256 as it lands (and removes what
    # does not match), so what reaches the manifest is verified once and never re-hashed by plan
    # unless its stat fingerprint moves.
    if spec.missing:
        started = ports.clock.monotonic()
        fetched = ports.hub.download(
            spec,
            lambda name, done, total: reporter.progress(name, done, total),
            lambda text: reporter.line("model", text),
        )
        seconds = max(ports.clock.monotonic() - started, 1e-6)
        # Only bytes that came from the hub count: blobs already in the cache are verified and adopted.
        reporter.event(
            "downloaded",
            repo=spec.repo,
            files=len(spec.missing),
            bytes=fetched,
            adopted=spec.bytes_to_fetch - fetched,
            seconds=round(seconds, 1),
            mib_per_s=round(fetched / seconds / (1 << 20), 1),
        )
    stats = _verified_stats(spec, ports)
    ports.state.write(spec.manifest_key, manifest_record(spec.files, stats, spec.cache_dir))
    if spec.layout is not None and spec.layout_key:
        ports.state.write(spec.layout_key, spec.layout.model_dump(mode="json"))
    if not spec.missing:
        reporter.event("recorded", what="stat fingerprints", repo=spec.repo, files=len(stats))


def _verified_stats(spec: ModelDownload, ports: Ports) -> tuple[FileStat, ...]:
    """Stat fingerprints to record: each fetched file as it is now (just verified), each other file as
    observation verified it, if it has not moved since (else none: the next plan re-hashes it)."""
    observed = {s.path: s for s in spec.verified}
    missing, stats = set(spec.missing), []
    for f in spec.files:
        cached = ports.hub.cached_file(spec.repo, spec.revision, f.path, spec.cache_dir)
        if cached is None:
            raise DownloadFailed(f"not in the cache after download: {f.path}")
        now = file_stat(f.path, cached.stat())
        if f.path in missing or observed.get(f.path) == now:
            stats.append(now)
    return tuple(stats)


def verify_local_model(spec: LocalModelVerify, ports: Ports, reporter: Reporter) -> None:
    """Record the local model's manifest: each file as the plan hashed it when its stat has not moved since; one that
    moved is re-hashed, and a sha256 other than the plan's stops the apply here (before the server is touched)."""
    planned = {s.path: s for s in spec.stats}
    stats = []
    for f in spec.files:
        host_path = f"{spec.folder.rstrip('/')}/{f.path.removeprefix(spec.quant + '/')}"
        try:
            now = file_stat(f.path, Path(host_path).stat())
        except OSError as exc:
            raise InputError(
                f"model.local_path: {host_path} {exc.strerror or exc} since this plan read it",
                (("model", "local_path"),),
            ) from None
        # rule: local-path-verified
        # Serve only what was verified: a file written between the plan and this step is re-hashed, and a new
        # content is not recorded under the plan's sha256 (the container's fingerprint carries it).
        if planned.get(f.path) != now and ports.host.file_digest(host_path, "sha256") != f.sha256:
            raise InputError(
                f"model.local_path: {host_path} changed after this plan hashed it (sha256 differs): plan again",
                (("model", "local_path"),),
            )
        stats.append(now)
    ports.state.write(spec.manifest_key, manifest_record(spec.files, tuple(stats), spec.local_path))
    if spec.layout is not None and spec.layout_key:
        ports.state.write(spec.layout_key, spec.layout.model_dump(mode="json"))
    reporter.event(
        "recorded",
        what="local model manifest",
        path=spec.local_path,
        files=len(spec.files),
        bytes=sum(f.size for f in spec.files),
    )


def remove_model_files(spec: RemoveModelFiles, ports: Ports, reporter: Reporter) -> None:
    files = spec.download
    for f in files.files:
        ports.hub.remove_cached(files.repo, files.revision, f.path, files.cache_dir)
    ports.state.delete(files.manifest_key)
    reporter.event("removed", what="model", ref=f"{files.repo}@{files.revision[:12]}/{files.quant}")
