"""A container registry's HTTP API (docker distribution v2), read anonymously: the bytes a pull by digest moves.

Only asked when the image is absent (a converged plan never reaches the network). The manifest at the digest is
fetched with the Accept types of an image index and of a single-platform manifest (Docker's and OCI's); an index
is resolved to this host's platform (linux/amd64 or linux/arm64). Docker Hub and other registries answer 401 with
a Bearer challenge: the anonymous token from its realm is fetched and used for this one read. No credentials are
read or sent (a private image's size stays unknown; the pull itself goes through dockerd and its logins).
Plain http is used for loopback registries only (dockerd's own rule for insecure registries).
"""

from __future__ import annotations

import platform
import re
from typing import TYPE_CHECKING, Any

from kimik3_reconciler.errors import PermanentError, TransientError
from kimik3_reconciler.model.image_ref import PinnedImage, pinned_image, tagged_image

if TYPE_CHECKING:
    import httpx

_INDEX = ("application/vnd.docker.distribution.manifest.list.v2+json", "application/vnd.oci.image.index.v1+json")
_MANIFEST = ("application/vnd.docker.distribution.manifest.v2+json", "application/vnd.oci.image.manifest.v1+json")
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
TIMEOUT_S = 10.0


def host_platform() -> str:
    """This host's architecture as image indexes name it."""
    machine = platform.machine().lower()
    return _ARCH.get(machine, machine)


def _challenge(header: str) -> dict[str, str]:
    """`Bearer realm="…",service="…",scope="…"` -> its parameters."""
    return dict(re.findall(r'(\w+)="([^"]*)"', header))


def manifest_bytes(manifest: dict[str, Any]) -> int:
    """A single-platform manifest's config and layers, as the registry stores them (compressed)."""
    parts = [manifest.get("config") or {}, *(manifest.get("layers") or ())]
    return sum(int(p.get("size", 0)) for p in parts)


def platform_digest(index: dict[str, Any], arch: str) -> str | None:
    """The digest of the index's linux/`arch` manifest (attestation entries have platform unknown/unknown)."""
    for entry in index.get("manifests") or ():
        wanted = entry.get("platform") or {}
        if wanted.get("os") == "linux" and wanted.get("architecture") == arch:
            return str(entry["digest"])
    return None


class RegistryApi:
    """RegistryPort over httpx."""

    def pull_bytes(self, ref: str) -> int:
        import httpx

        image = pinned_image(ref)
        base = f"{'http' if image.loopback else 'https'}://{image.api_host}/v2/{image.repository}/manifests/"
        try:
            with httpx.Client(timeout=TIMEOUT_S, follow_redirects=True) as client:
                auth: dict[str, str] = {}  # the anonymous token, once the registry asked for one (kept for this read)
                manifest = self._get(client, image, base + image.digest, auth)
                if manifest.get("mediaType") in _INDEX or "manifests" in manifest:
                    digest = platform_digest(manifest, host_platform())
                    if digest is None:
                        raise PermanentError(f"{ref}: the image index has no linux/{host_platform()} manifest")
                    manifest = self._get(client, image, base + digest, auth)
        except httpx.TransportError as exc:
            raise TransientError(f"registry {image.api_host} not reachable: {exc}") from exc
        return manifest_bytes(manifest)

    def digest_of(self, ref: str) -> str:
        """The digest (`sha256:<64 hex>`) the registry serves for `ref`'s tag now: its manifest's, or its image
        index's when the tag names several platforms (what `docker pull` records and pulls by)."""
        import hashlib

        import httpx

        image = tagged_image(ref)
        url = f"{'http' if image.loopback else 'https'}://{image.api_host}/v2/{image.repository}/manifests/{image.tag}"
        try:
            with httpx.Client(timeout=TIMEOUT_S, follow_redirects=True) as client:
                response = self._answer(client, image, url, {})
        except httpx.TransportError as exc:
            raise TransientError(f"registry {image.api_host} not reachable: {exc}") from exc
        digest = response.headers.get("docker-content-digest", "")
        # A registry that leaves the header out: the digest is the sha256 of the manifest's bytes as served.
        return (
            digest
            if re.fullmatch(r"sha256:[0-9a-f]{64}", digest)
            else f"sha256:{hashlib.sha256(response.content).hexdigest()}"
        )

    def _get(self, client: httpx.Client, image: PinnedImage, url: str, auth: dict[str, str]) -> dict[str, Any]:
        body: dict[str, Any] = self._answer(client, image, url, auth).json()
        return body

    def _answer(self, client: httpx.Client, image: PinnedImage, url: str, auth: dict[str, str]) -> httpx.Response:
        """The registry's 200 answer for a manifest URL (the anonymous token fetched when asked), else why not."""
        accept = {"Accept": ", ".join((*_INDEX, *_MANIFEST))}
        response = client.get(url, headers={**accept, **auth})
        if response.status_code == 401 and response.headers.get("www-authenticate", "").lower().startswith("bearer"):
            # The registry's anonymous token for a public image: asked of its realm, used for this read only.
            params = _challenge(response.headers["www-authenticate"])
            realm = params.pop("realm", "")
            params.setdefault("scope", f"repository:{image.repository}:pull")
            token = client.get(realm, params=params) if realm else None
            if token is not None and token.status_code == 200:
                auth["Authorization"] = f"Bearer {token.json().get('token', '')}"
                response = client.get(url, headers={**accept, **auth})
        if response.status_code in (401, 403):
            raise PermanentError(f"registry {image.api_host} wants a login to read {image.repository}'s manifest")
        if response.status_code == 404:
            raise PermanentError(
                f"registry {image.api_host} has no manifest {image.repository}@{url.rsplit('/', 1)[-1]}"
            )
        if response.status_code != 200:
            raise TransientError(f"registry {image.api_host} answered HTTP {response.status_code} for the manifest")
        return response
