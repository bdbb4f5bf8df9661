"""An image pulled by digest (engines whose image_source is `pull`): is an image with that digest here, and if not,
what would its pull move (the registry's manifest, asked only then: a converged plan asks no registry)."""

from __future__ import annotations

from typing import Any

from kimik3_reconciler.errors import StepError
from kimik3_reconciler.model.facts import PulledImageFact
from kimik3_reconciler.model.image_ref import pinned_image
from kimik3_reconciler.observe.docker_objects import parse_repo_digest
from kimik3_reconciler.ports import DockerPort, RegistryPort


def holds_digest(ref: str, digest: str, inspect: dict[str, Any] | None) -> bool:
    """Does the local image carry `digest` for `ref`'s repository among its RepoDigests (docker's record of what
    it pulled)? An imported or locally built image has none and never counts as the pinned one."""
    return any(
        parse_repo_digest(ref, {"RepoDigests": [entry]}) == digest for entry in (inspect or {}).get("RepoDigests") or ()
    )


def collect_pulled(ref: str, docker: DockerPort, registry: RegistryPort | None) -> PulledImageFact:
    image = pinned_image(ref)
    inspect = docker.inspect_image(image.by_digest)
    if inspect is not None and holds_digest(image.by_digest, image.digest, inspect):
        return PulledImageFact(ref=ref, digest=image.digest, image_id=inspect.get("Id"))
    if registry is None:  # `kimik3 status` (and tests without a registry): no network for a size
        return PulledImageFact(ref=ref, digest=image.digest, size_unknown="the registry was not asked")
    try:
        return PulledImageFact(ref=ref, digest=image.digest, pull_bytes=registry.pull_bytes(ref))
    except StepError as exc:  # the size is for people: the pull itself says whether the registry works
        return PulledImageFact(ref=ref, digest=image.digest, size_unknown=str(exc))
