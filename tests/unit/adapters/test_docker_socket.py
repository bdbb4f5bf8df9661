"""Docker reads over the unix socket (adapters/docker_socket.py): used exactly where the SDK would use a
socket, the same requests as the SDK's, and the daemon's errors translated as the SDK's are.

No daemon: a stdlib HTTP server on a unix socket in tmp_path plays dockerd and records what it is asked;
the docker SDK is pointed at the same socket to compare. Against the real dockerd:
tests/integration/test_docker_reads.py."""

from __future__ import annotations

import json
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from support.json_http import JsonHandler

from kimik3_reconciler.adapters.docker_engine import DockerEngine
from kimik3_reconciler.adapters.docker_socket import DEFAULT_SOCKET, EngineSocket, engine_socket
from kimik3_reconciler.errors import PermanentError, TransientError

# where the SDK would talk ---------------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    ("base_url", "environ", "socket"),
    [
        (None, {}, DEFAULT_SOCKET),  # nothing set: the default context
        (None, {"DOCKER_HOST": "unix:///run/user/1000/docker.sock"}, "/run/user/1000/docker.sock"),  # rootless
        ("unix:///tmp/d.sock", {"DOCKER_HOST": "tcp://10.0.0.1:2375"}, "/tmp/d.sock"),  # --docker-host wins
        ("http+unix:///tmp/d.sock/", {}, "/tmp/d.sock"),
        ("unix://", {}, DEFAULT_SOCKET),
        (None, {"DOCKER_HOST": ""}, DEFAULT_SOCKET),  # empty = unset, as the SDK reads it
        ("tcp://10.0.0.1:2375", {}, None),  # the SDK reads (TLS, proxies: its own)
        ("ssh://builder", {}, None),
        ("10.0.0.1:2375", {}, None),
        ("unix://var/run/docker.sock", {}, None),  # the SDK's legacy relative form
        (None, {"DOCKER_CONTEXT": "remote"}, None),  # a named context: the SDK resolves it
        (None, {"DOCKER_CONTEXT": "default"}, DEFAULT_SOCKET),
    ],
)
def test_the_socket_is_used_where_the_sdk_would_use_it(
    home: Path, base_url: str | None, environ: dict[str, str], socket: str | None
) -> None:
    assert engine_socket(base_url, environ) == socket


def test_the_docker_config_current_context_is_honoured(home: Path, tmp_path: Path) -> None:
    config = home / ".docker" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"currentContext": "desktop-linux"}))
    assert engine_socket(None, {}) is None
    config.write_text(json.dumps({"auths": {}}))
    assert engine_socket(None, {}) == DEFAULT_SOCKET
    elsewhere = tmp_path / "cfg"
    elsewhere.mkdir()
    (elsewhere / "config.json").write_text(json.dumps({"currentContext": "remote"}))
    assert engine_socket(None, {"DOCKER_CONFIG": str(elsewhere)}) is None
    config.write_text("{not json")
    assert engine_socket(None, {}) == DEFAULT_SOCKET  # as docker.context reads a broken file


# a fake dockerd on a unix socket ----------------------------------------------------------------------


class FakeDaemon:
    """Answers (status, JSON) by path, records every request target."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, Any]] = {}
        self.asked: list[str] = []


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[FakeDaemon, str]]:
    fake = FakeDaemon()

    class Handler(JsonHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            fake.asked.append(self.path)
            path = self.path.split("?")[0]
            for prefix in ("/v1.41",):  # the SDK's versioned paths answer the same
                path = path.removeprefix(prefix)
            status, answer = fake.answers.get(path, (404, {"message": f"page not found: {path}"}))
            self.send_json(status, answer)

    path = str(tmp_path / "docker.sock")
    server = socketserver.ThreadingUnixStreamServer(path, Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield fake, path
    server.shutdown()
    server.server_close()


CALLS = [
    ("info", (), {}),
    ("inspect_container", ("kimi-k3-demo",), {}),
    ("inspect_image", ("kimi-k3-llamacpp:mainline-ad1de39-cpu",), {}),
    ("inspect_image", ("nvidia/cuda@sha256:" + "ab" * 32,), {}),
    ("images", (), {"filters": {"label": "kimik3.image.fingerprint"}}),
    ("containers", (), {"all": True, "filters": {"label": ["kimik3.container.fingerprint", "a=b"]}}),
]


@pytest.mark.parametrize(("call", "args", "kwargs"), CALLS)
def test_each_read_asks_what_the_sdk_asks_and_returns_its_answer(
    daemon: tuple[FakeDaemon, str], call: str, args: tuple[str, ...], kwargs: dict
) -> None:
    fake, path = daemon
    answer = [{"Id": "sha256:1"}] if call in ("images", "containers") else {"Id": "sha256:1", "Name": "x"}
    for target in (
        "/info",
        "/containers/kimi-k3-demo/json",
        "/images/json",
        "/containers/json",
        "/images/kimi-k3-llamacpp:mainline-ad1de39-cpu/json",
        "/images/nvidia/cuda%40sha256:" + "ab" * 32 + "/json",
    ):
        fake.answers[target] = (200, answer)
    ours = getattr(EngineSocket(path), call)(*args, **kwargs)
    sdk = getattr(docker.APIClient(base_url=f"unix://{path}", version="1.41"), call)(*args, **kwargs)
    socket_asked, sdk_asked = fake.asked
    assert ours == sdk == answer
    assert socket_asked == sdk_asked.removeprefix("/v1.41")  # unversioned: the daemon's own API version


def test_an_absent_object_reads_as_none_and_errors_are_translated(daemon: tuple[FakeDaemon, str]) -> None:
    fake, path = daemon
    engine = DockerEngine(f"unix://{path}")
    assert engine.inspect_container("nope") is None and engine.image_id("nope:latest") is None
    fake.answers["/info"] = (503, {"message": "the daemon is shutting down"})
    with pytest.raises(TransientError, match="^docker daemon restarting: the daemon is shutting down$"):
        engine._call(engine.reads.info)  # the translation alone (engine.info() retries it for 90 s)
    fake.answers["/info"] = (500, {"message": "driver failed programming external connectivity"})
    with pytest.raises(PermanentError, match="^docker: 500 Internal Server Error: driver failed programming"):
        engine.info()  # a failing daemon: not retried
    fake.answers["/containers/json"] = (400, {"message": "invalid filter 'x'"})
    with pytest.raises(PermanentError, match=r"^docker: 400 Bad Request: invalid filter 'x'$"):
        engine.list_containers("x")


def test_images_and_containers_are_listed_then_inspected(daemon: tuple[FakeDaemon, str]) -> None:
    """As the SDK's images.list() (each image's inspect is its attrs); an object gone in between is skipped."""
    fake, path = daemon
    fake.answers["/images/json"] = (200, [{"Id": "sha256:aa"}, {"Id": "sha256:gone"}])
    fake.answers["/images/sha256:aa/json"] = (200, {"Id": "sha256:aa", "Config": {"Labels": {"l": "1"}}})
    fake.answers["/containers/json"] = (200, [{"Id": "c1"}])
    fake.answers["/containers/c1/json"] = (200, {"Id": "c1", "Name": "/k3"})
    engine = DockerEngine(f"unix://{path}")
    assert engine.list_images("l") == [{"Id": "sha256:aa", "Config": {"Labels": {"l": "1"}}}]
    assert engine.list_containers("l") == [{"Id": "c1", "Name": "/k3"}]
