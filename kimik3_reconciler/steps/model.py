"""The model cache: download the missing files at the pinned revision (verified), record the manifest; or remove them."""

from __future__ import annotations

from kimik3_reconciler.errors import DownloadFailed
from kimik3_reconciler.model.model_files import manifest_record
from kimik3_reconciler.model.specs import ModelDownload, RemoveModelFiles
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.report import Reporter


def download_model(spec: ModelDownload, ports: Ports, reporter: Reporter) -> None:
    # The hub port verifies every file against the hub's sha256 as it lands (and removes what
    # does not match), so what reaches the manifest is verified once and never re-hashed by plan.
    started = ports.clock.monotonic()
    ports.hub.download(spec, lambda name, done, total: reporter.progress(name, done, total))
    seconds = max(ports.clock.monotonic() - started, 1e-6)
    missing = [f.path for f in spec.files if ports.hub.cached_file(spec.repo, spec.revision, f.path, spec.cache_dir) is None]
    if missing:
        raise DownloadFailed(f"not in the cache after download: {', '.join(missing)}")
    reporter.event("downloaded", repo=spec.repo, files=len(spec.missing), bytes=spec.bytes_to_fetch,
                   seconds=round(seconds, 1), mib_per_s=round(spec.bytes_to_fetch / seconds / (1 << 20), 1))
    ports.state.write(spec.manifest_key, manifest_record(spec.files))


def remove_model_files(spec: RemoveModelFiles, ports: Ports, reporter: Reporter) -> None:
    files = spec.download
    for f in files.files:
        ports.hub.remove_cached(files.repo, files.revision, f.path, files.cache_dir)
    ports.state.delete(files.manifest_key)
    reporter.event("removed", what="model", ref=f"{files.repo}@{files.revision[:12]}/{files.quant}")
