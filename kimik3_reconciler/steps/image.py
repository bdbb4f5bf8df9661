"""Images: base images present, the pinned source archive verified, patches ordered, build; re-tag a kept
build; remove one."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from kimik3_reconciler.errors import InputError
from kimik3_reconciler.model.labels import BASE_DIGESTS, BASE_IMAGES, IMAGE_FINGERPRINT
from kimik3_reconciler.model.records import archive_record_key, build_time_key
from kimik3_reconciler.model.specs import ImageBuild, RemoveImage, RetagImage
from kimik3_reconciler.observe.build_log import compiled
from kimik3_reconciler.observe.docker_objects import parse_repo_digest
from kimik3_reconciler.observe.local_inputs import sha256_file
from kimik3_reconciler.ports import DockerPort, Ports
from kimik3_reconciler.steps.preread import preread_alongside
from kimik3_reconciler.steps.report import Reporter
from kimik3_reconciler.steps.statistic import write_statistic


def _checked(sha: str, spec: ImageBuild, recorded: str | None) -> None:
    if spec.archive_sha256 and sha != spec.archive_sha256:
        raise InputError(f"source archive {spec.archive}: sha256 {sha} != build.archive_sha256 {spec.archive_sha256}")
    if recorded and sha != recorded and sha != spec.archive_sha256:
        raise InputError(
            f"source archive {spec.archive}: sha256 {sha} differs from its first use ({recorded}); "
            "a pinned source must not change"
        )


def _source_archive(spec: ImageBuild, ports: Ports, reporter: Reporter) -> tuple[Path, str]:
    """(local file, sha256): a local archive as is; a URL fetched once into the state dir."""
    record = ports.state.read(archive_record_key(spec.source, spec.commit)) or {}
    if not spec.archive.startswith(("http://", "https://")):
        path = Path(spec.archive)
        return path, spec.archive_sha256 or sha256_file(path)
    key = f"archives/{spec.source}-{spec.commit}.tar.gz"
    kept = ports.state.artifact(key)
    if kept is not None:
        sha = sha256_file(kept)
        if sha in (record.get("sha256"), spec.archive_sha256):
            return kept, sha
        ports.state.discard(key)  # a foreign file: fetch again, and check it like a first fetch
    reporter.event("fetch-archive", url=spec.archive)
    fetched: dict[str, str] = {}

    def fetch(staging: Path) -> None:
        # Checked before it is renamed into place: a mismatching archive is never kept.
        fetched["sha"] = ports.http.fetch(spec.archive, staging)
        _checked(fetched["sha"], spec, record.get("sha256"))

    return ports.state.produce(key, fetch), fetched["sha"]


def _base_images(spec: ImageBuild, ports: Ports, reporter: Reporter) -> tuple[dict[str, str], dict[str, str | None]]:
    """({ref: local id}, {ref: repo digest}) of the base images, pulled when absent (a pinned ref by its digest)."""
    ids, digests = {}, {}
    for ref in dict.fromkeys(dict(spec.build_args)[k] for k in ("BUILD_IMAGE", "RUNTIME_IMAGE")):
        inspect = ports.docker.inspect_image(ref)
        if inspect is None:
            reporter.event("pull", image=ref)
            ports.docker.pull_image(ref)
            inspect = ports.docker.inspect_image(ref) or {}
        ids[ref], digests[ref] = inspect.get("Id", ""), parse_repo_digest(ref, inspect)
    return ids, digests


def build_image(spec: ImageBuild, ports: Ports, reporter: Reporter, this_host: bool = True) -> None:
    """Build the image; with `spec.preread`, read the model into the page cache meanwhile (issue 15): the
    compile takes minutes to an hour, the read hides behind it and the launch that follows loads warm.
    `this_host`: the build runs on this host's Docker, so its duration is this host's statistic (a worker's is not)."""
    if spec.preread is None:
        _build(spec, ports, reporter, this_host)
        return
    with preread_alongside(spec.preread, ports, reporter, "the image build") as shared:
        _build(spec, ports, shared, this_host)


def _build(spec: ImageBuild, ports: Ports, reporter: Reporter, this_host: bool) -> None:
    archive, sha = _source_archive(spec, ports, reporter)
    # Base image ids and digests are stamped on the image: a re-pulled base (security fix), a tag that now
    # points to another digest, shows up in the plan as a rebuild reason.
    ids, digests = _base_images(spec, ports, reporter)
    labelled = replace(
        spec,
        preread=None,
        labels=spec.labels
        + ((BASE_IMAGES, json.dumps(ids, sort_keys=True)), (BASE_DIGESTS, json.dumps(digests, sort_keys=True))),
    )
    # The build context's names: the engine's Dockerfile (spec.dockerfile: llama.cpp's, or --dockerfile's) goes in as
    # `Dockerfile`, the name the Docker port builds from; the layer cache keys on content, not on that name.
    files = {
        "Dockerfile": Path(spec.dockerfile),
        "source.tar.gz": archive,
        **{f"patches/{name}": Path(path) for name, path in spec.patches},
    }
    # Recorded at first use (before building): every later use of this pin must match it.
    ports.state.write(archive_record_key(spec.source, spec.commit), {"location": spec.archive, "sha256": sha})
    lines: list[str] = []

    def line(text: str) -> None:
        lines.append(text)
        reporter.line("build", text)

    started = ports.clock.monotonic()
    ports.docker.build_image(labelled, files, line)
    if this_host:
        _record_build(spec, ports.clock.monotonic() - started, compiled(lines), ports, reporter)


def _record_build(spec: ImageBuild, seconds: float, full: bool, ports: Ports, reporter: Reporter) -> None:
    """The next plan predicts a build from what this host took (issue 27 item 7): full compiles and builds that
    Docker's layer cache answered apart, so a 2-second cached build never stands for an hour's compile."""
    # Statistics: a state dir that cannot take the record warns, it never fails a build that succeeded.
    write_statistic(
        ports.state,
        build_time_key(spec.variant, cached=not full),
        {
            "seconds": round(seconds, 1),
            "date": ports.clock.now().isoformat(timespec="seconds"),
            "fingerprint": spec.fingerprint,
        },
        reporter,
    )
    reporter.event("built", image=spec.tag, seconds=round(seconds, 1), compile="full" if full else "layer cache")


def retag_image(spec: RetagImage, ports: Ports, reporter: Reporter) -> None:
    ports.docker.tag_image(spec.image_id, spec.tag)
    reporter.event("retagged", image=spec.image_id[:19], tag=spec.tag)


def remove_image(spec: RemoveImage, ports: Ports, reporter: Reporter) -> None:
    ports.docker.remove_image(spec.ref)
    reporter.event("removed", what="image", ref=spec.ref)


def pin_tag(docker: DockerPort, tag: str, image_fingerprint: str | None, reporter: Reporter) -> None:
    """Right before a launch: point `tag` back at the build with `image_fingerprint` if it moved since the
    plan. Profiles of one pin with other patches share the tag (`<source>-<commit>`) on one daemon, and each
    apply re-tags its own build; without this, a launch between two of them would run the other's image."""
    if not image_fingerprint:
        return
    current = docker.inspect_image(tag)
    if ((current or {}).get("Config") or {}).get("Labels", {}).get(IMAGE_FINGERPRINT) == image_fingerprint:
        return
    ours = docker.list_images(label=f"{IMAGE_FINGERPRINT}={image_fingerprint}")
    if ours:
        docker.tag_image(ours[0]["Id"], tag)
        reporter.event("retagged", image=ours[0]["Id"][:19], tag=tag, why="the tag moved since the plan")
