"""A real container registry on loopback for tests (Debian's docker-registry via scripts/ensure-registry.sh, on a
free port with its own storage), and a small image built here and pushed to it, known by its digest."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from support.ports import free_port
from support.realparts import REPO_ROOT, docker

PAYLOAD = 256 << 10  # random bytes in the image's one layer: incompressible, so the layer holds at least this


@contextmanager
def loopback_registry(root: Path) -> Iterator[str]:
    """`127.0.0.1:PORT` of a registry started for the caller (storage, config, log under `root`); stopped after."""
    port = free_port()
    started = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "ensure-registry.sh"), str(port), str(root)],
        capture_output=True,
        text=True,
    )
    assert started.returncode == 0, started.stderr
    try:
        yield started.stdout.strip()
    finally:
        try:
            os.kill(int((root / "registry.pid").read_text()), signal.SIGTERM)
        except ProcessLookupError:  # a test that killed it (a registry dying mid-pull) and did not bring it back
            pass


def push_random_image(registry: str, repository: str, context: Path, size: int = PAYLOAD) -> tuple[str, str]:
    """(the tagged ref, its digest) of a one-layer image (FROM scratch, `size` random bytes) built, pushed to
    `registry` and then removed from dockerd: unique per call, so never already pulled."""
    (context / "payload").write_bytes(os.urandom(size))
    (context / "Dockerfile").write_text("FROM scratch\nCOPY payload /payload\n")
    tag = f"{registry}/{repository}:test"
    docker("build", "-q", "-t", tag, str(context))
    return tag, pushed_by_digest(tag)


def pushed_by_digest(tag: str, image: str | None = None) -> str:
    """The digest of `tag` (first tagged from the local `image` when given) pushed to its registry; the tag is then
    removed from dockerd (its layers stay local), so a run that names it by digest must pull it."""
    if image is not None:
        docker("tag", image, tag)
    docker("push", tag)
    digest = json.loads(docker("image", "inspect", tag))[0]["RepoDigests"][0].partition("@")[2]
    docker("rmi", tag)
    return digest
