"""Ensure model: download the missing files at the pinned revision, verify sha256, record the manifest."""

from __future__ import annotations

from kimik3_reconciler.errors import DownloadFailed
from kimik3_reconciler.model.plan import Step
from kimik3_reconciler.model.specs import ModelDownload
from kimik3_reconciler.observe.local_inputs import sha256_file
from kimik3_reconciler.model.model_files import manifest_record
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.report import Reporter


def download_model(step: Step, ports: Ports, reporter: Reporter) -> None:
    spec: ModelDownload = step.spec
    ports.hub.download(spec, lambda name, done, total: reporter.progress(name, done, total))
    for f in spec.files:
        cached = ports.hub.cached_file(spec.repo, spec.revision, f.path, spec.cache_dir)
        if cached is None:
            raise DownloadFailed(f"{f.path}: not in the cache after download")
        actual = sha256_file(cached) if f.sha256 else None
        if f.sha256 and actual != f.sha256:
            # Never serve a corrupt shard: drop it so the next apply fetches it again.
            blob = cached.resolve()
            cached.unlink(missing_ok=True)
            blob.unlink(missing_ok=True)
            raise DownloadFailed(f"{f.path}: sha256 {actual} != hub's {f.sha256}; removed, run apply again")
        reporter.event("verified", file=f.path, sha256=f.sha256)
    ports.state.write(spec.manifest_key, manifest_record(spec.files))
