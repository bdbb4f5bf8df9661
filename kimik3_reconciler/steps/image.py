"""Ensure image: assemble the build context (Dockerfile, source archive, ordered patches) and build."""

from __future__ import annotations

from pathlib import Path

from kimik3_reconciler.errors import InputError
from kimik3_reconciler.model.plan import Step
from kimik3_reconciler.model.specs import ImageBuild
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.report import Reporter


def _local_archive(spec: ImageBuild, ports: Ports, reporter: Reporter) -> Path:
    if not spec.archive.startswith(("http://", "https://")):
        return Path(spec.archive)
    key = f"archives/{spec.archive_sha256 or Path(spec.archive).name}.tar.gz"
    dest = ports.state.path(key)
    recorded = ports.state.read(key + ".json")
    if dest.is_file() and recorded:
        return dest
    reporter.event("fetch-archive", url=spec.archive)
    sha = ports.http.fetch(spec.archive, dest)
    if spec.archive_sha256 and sha != spec.archive_sha256:
        dest.unlink(missing_ok=True)
        raise InputError(f"source archive {spec.archive}: sha256 {sha} != pinned {spec.archive_sha256}")
    # Recorded on first fetch; a later fetch of the same pin must match (issue 3 deepens this).
    ports.state.write(key + ".json", {"url": spec.archive, "sha256": sha})
    return dest


def build_image(step: Step, ports: Ports, reporter: Reporter) -> None:
    spec: ImageBuild = step.spec
    files = {
        "Dockerfile.llamacpp": Path(spec.dockerfile),
        "source.tar.gz": _local_archive(spec, ports, reporter),
        **{f"patches/{name}": Path(path) for name, path in spec.patches},
    }
    ports.docker.build_image(spec, files, lambda text: reporter.line("build", text))
