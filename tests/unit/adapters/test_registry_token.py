"""The registry size query's path that the loopback docker-registry (no auth) cannot show: Docker Hub's answer,
401 with a Bearer challenge, the anonymous token fetched from the challenge's realm and sent once, then an OCI image
index resolved to this host's platform. A stdlib stub speaks the distribution API's side of it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kimik3_reconciler.adapters.registry import RegistryApi, host_platform
from kimik3_reconciler.errors import PermanentError

INDEX_DIGEST, PLATFORM_DIGEST = "sha256:" + "a" * 64, "sha256:" + "b" * 64
INDEX = {
    "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [
        {"digest": "sha256:" + "c" * 64, "platform": {"os": "unknown", "architecture": "unknown"}},
        {"digest": PLATFORM_DIGEST, "platform": {"os": "linux", "architecture": host_platform()}},
    ],
}
MANIFEST = {
    "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"size": 7000},
    "layers": [{"size": 3 << 30}, {"size": 5 << 20}],
}


class Hub(BaseHTTPRequestHandler):
    seen: list[tuple[str, str | None]] = []

    def log_message(self, *args: object) -> None:
        pass

    def _json(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.seen.append((self.path, self.headers.get("Authorization")))
        host = self.headers["Host"]
        if self.path.startswith("/token"):
            assert "scope=repository%3Avllm%2Fvllm-openai%3Apull" in self.path and "service=stub" in self.path
            return self._json(200, {"token": "anonymous-token"})
        if self.headers.get("Authorization") != "Bearer anonymous-token":
            challenge = f'Bearer realm="http://{host}/token",service="stub",scope="repository:vllm/vllm-openai:pull"'
            return self._json(401, {"errors": [{"code": "UNAUTHORIZED"}]}, {"WWW-Authenticate": challenge})
        documents = {
            f"/v2/vllm/vllm-openai/manifests/{INDEX_DIGEST}": INDEX,
            f"/v2/vllm/vllm-openai/manifests/{PLATFORM_DIGEST}": MANIFEST,
        }
        if self.path in documents:
            return self._json(200, documents[self.path])
        return self._json(404, {"errors": [{"code": "MANIFEST_UNKNOWN"}]})


@pytest.fixture
def registry() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Hub.seen = []
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_bearer_challenge_gets_the_anonymous_token_and_the_platform_manifest_is_summed(registry: str) -> None:
    size = RegistryApi().pull_bytes(f"{registry}/vllm/vllm-openai:kimi-k3@{INDEX_DIGEST}")
    assert size == 7000 + (3 << 30) + (5 << 20)
    manifests = [auth for path, auth in Hub.seen if "/manifests/" in path]
    assert manifests == [None, "Bearer anonymous-token", "Bearer anonymous-token"]  # no credential of ours
    assert sum(path.startswith("/token") for path, _ in Hub.seen) == 1  # one token for the whole read


def test_a_digest_the_registry_lacks_is_named(registry: str) -> None:
    with pytest.raises(PermanentError, match=f"registry {registry} has no manifest vllm/vllm-openai@sha256:0000"):
        RegistryApi().pull_bytes(f"{registry}/vllm/vllm-openai@sha256:{'0' * 64}")
