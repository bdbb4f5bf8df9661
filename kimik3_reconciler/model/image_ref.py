"""An image named by digest (`[registry/]repository[:tag]@sha256:<64 hex>`), as engines that pull their image use it
(vLLM's `vllm/vllm-openai:kimi-k3@sha256:…`, SGLang's): parsed once, pure.

The digest is the pin: the tag is for people and is never what kimik3 pulls or checks. Docker Hub's short names are
spelled out as the registry API wants them (`vllm/vllm-openai` -> registry-1.docker.io, `ubuntu` -> library/ubuntu).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.hub_endpoint import is_loopback_host

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_REPOSITORY = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
DOCKER_HUB = "docker.io"
_HUB_API = "registry-1.docker.io"


class PinnedImage(NamedTuple):
    """`ref` split: `registry` (host[:port], `docker.io` for Docker Hub), `repository` (as the registry's API names
    it), the `tag` if any (for people), the `digest` (the pin)."""

    ref: str
    registry: str
    repository: str
    tag: str | None
    digest: str

    @property
    def by_digest(self) -> str:
        """What kimik3 pulls and launches: the repository at the digest, no tag (a tag beside a digest is ignored by
        some daemons and refused by others)."""
        name = self.repository.removeprefix("library/") if self.registry == DOCKER_HUB else self.repository
        return f"{name if self.registry == DOCKER_HUB else f'{self.registry}/{name}'}@{self.digest}"

    @property
    def api_host(self) -> str:
        """The host the registry API answers on (Docker Hub's differs from its name)."""
        return _HUB_API if self.registry == DOCKER_HUB else self.registry

    @property
    def loopback(self) -> bool:
        """A registry on this host: dockerd allows plain http to 127.0.0.0/8 (and so does kimik3's size query)."""
        host = (
            self.registry.rsplit("]", 1)[0].lstrip("[")
            if self.registry.startswith("[")
            else self.registry.rsplit(":", 1)[0]
        )
        return is_loopback_host(host)


def pinned_image(ref: str, field: str = "image.ref") -> PinnedImage:
    """Parse `ref`; a PlanError naming `field` when it has no digest (a tag alone can move under the deployment) or
    is not an image reference."""
    name, at, digest = ref.partition("@")
    # rule: image-by-digest
    # Seed 001 runs `vllm/vllm-openai:kimi-k3`, a tag that moves: pulled by digest, every host runs the same bytes
    # and a re-apply pulls nothing.
    if not at:
        raise PlanError(
            f"{field}: {ref!r} names no digest: write it as repository[:tag]@sha256:<64 hex> (`docker "
            "buildx imagetools inspect REF` or the registry page shows it); a tag alone can move",
            (tuple(field.split(".")),),
        )
    if not _DIGEST.fullmatch(digest):
        raise PlanError(
            f"{field}: {digest!r} is not a sha256 digest (sha256: and 64 lowercase hex digits)",
            (tuple(field.split(".")),),
        )
    return _named(ref, name, digest, field)


def tagged_image(ref: str, field: str = "image.ref") -> PinnedImage:
    """`ref` named by its tag (`vllm/vllm-openai:kimi-k3`), for `kimik3 pin` to ask the registry its digest: the
    parts as pinned_image gives them, `digest` empty. A PlanError naming `field` when it has no tag."""
    image = _named(ref, ref.partition("@")[0], "", field)
    if image.tag is None:
        raise PlanError(f"{field}: {ref!r} names no tag to resolve: write repository:tag", (tuple(field.split(".")),))
    return image


def _named(ref: str, name: str, digest: str, field: str) -> PinnedImage:
    first, slash, rest = name.partition("/")
    # The first component is a registry when it looks like a host (a dot, a port, localhost): docker's own rule.
    registry = first if slash and ("." in first or ":" in first or first == "localhost") else DOCKER_HUB
    path = rest if registry != DOCKER_HUB or first in ("docker.io", "index.docker.io") else name
    tag = None
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        path, tag = path.rsplit(":", 1)
        if not _TAG.fullmatch(tag):
            raise PlanError(f"{field}: {tag!r} is not a valid image tag", (tuple(field.split(".")),))
    if registry == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"  # Docker Hub's official images
    if not _REPOSITORY.fullmatch(path):
        raise PlanError(f"{field}: {name!r} is not a valid image repository name", (tuple(field.split(".")),))
    return PinnedImage(ref, "docker.io" if registry == "index.docker.io" else registry, path, tag, digest)
