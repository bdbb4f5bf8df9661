"""Docker Engine API reads over the daemon's unix socket, with the standard library only.

What every `plan` asks (info, the container, its image, images and containers by label) costs, through
the docker SDK, ~75 ms of imports (requests, urllib3, ...) and ~5 ms a request on a 2-core machine,
about a quarter of a no-op plan; over the socket (adapters/http_wire.py: what http.client sends, without
its ~20 ms of imports) it is ~0.5 ms a request. `EngineSocket` offers the five read calls of `docker.APIClient` kimik3 uses, with the same
names, arguments and answers (the same JSON: unversioned paths get the daemon's own API version, which
is what the SDK negotiates), so adapters/docker_engine.py reads through either. Writes stay on the SDK.

It is used only where the SDK would itself talk to a unix socket (`engine_socket`): DOCKER_HOST
`unix:///path`, or nothing set and Docker's default context. tcp://, ssh://, TLS and other contexts
keep the SDK for reads too. Errors are this module's own two classes; docker_engine translates them
as it translates the SDK's (TransientError: retried through a daemon restart; PermanentError).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from kimik3_reconciler.adapters import http_wire

DEFAULT_SOCKET = "/var/run/docker.sock"  # docker.constants.DEFAULT_UNIX_SOCKET, the default context's endpoint


class EngineUnreachable(Exception):
    """No answer: no socket, refused, closed before answering, or timed out."""


class EngineApiError(Exception):
    """The daemon answered with an error status; `message` is its own explanation."""

    def __init__(self, status: int, reason: str, message: str):
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.message = status, message

    def is_server_error(self) -> bool:
        return 500 <= self.status < 600


def engine_socket(base_url: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The unix socket the docker SDK would talk to for `DockerClient(base_url)` / `docker.from_env()`, or
    None when it would not use one (tcp, ssh, a named context): then kimik3 reads through the SDK.

    Mirrors docker 7's rules: an explicit base_url wins; else DOCKER_HOST; else the current context
    (DOCKER_CONTEXT, then `currentContext` in the docker config file), whose default is the local socket."""
    environ = os.environ if environ is None else environ
    url = base_url or environ.get("DOCKER_HOST") or None
    if url is None:
        return DEFAULT_SOCKET if _context_name(environ) == "default" else None
    return unix_socket_path(url)


def unix_socket_path(url: str) -> str | None:
    """The socket path of a unix:// docker URL (None: another scheme, or the SDK's legacy relative form)."""
    url = url.strip()
    if url == "unix://":
        return DEFAULT_SOCKET
    parts = urlsplit(url)
    if parts.scheme not in ("unix", "http+unix") or parts.netloc or parts.query or parts.fragment:
        return None  # not a socket; or the SDK's legacy `unix://relative/path` form: left to the SDK
    path = parts.path.rstrip("/")
    return path if path.startswith("/") else None


def _context_name(environ: Mapping[str, str]) -> str:
    """docker.context: DOCKER_CONTEXT, else `currentContext` of the first docker config file found."""
    if environ.get("DOCKER_CONTEXT"):
        return environ["DOCKER_CONTEXT"]
    home = Path(os.path.expanduser("~"))
    candidates = [Path(environ["DOCKER_CONFIG"]) / "config.json"] if environ.get("DOCKER_CONFIG") else []
    for config in (*candidates, home / ".docker" / "config.json", home / ".dockercfg"):
        if config.exists():
            try:
                return json.loads(config.read_text()).get("currentContext", "default")
            except Exception:  # the SDK reads an unreadable config as the default context
                return "default"
    return "default"


class EngineSocket:
    """`docker.APIClient`'s read calls kimik3 makes (info, inspect_container, inspect_image, inspect_volume, images,
    containers), over a unix socket. A connection per request: nothing goes stale in a long reconcile loop."""

    def __init__(self, path: str, timeout: float = 120.0):
        self.path, self.timeout = path, timeout

    def info(self) -> dict[str, Any]:
        return self._get("/info")

    def inspect_container(self, container: str) -> dict[str, Any]:
        return self._get(f"/containers/{_quoted(container)}/json")

    def inspect_image(self, image: str) -> dict[str, Any]:
        return self._get(f"/images/{_quoted(image)}/json")

    def inspect_volume(self, name: str) -> dict[str, Any]:
        return self._get(f"/volumes/{_quoted(name)}")

    def images(self, filters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        params = {"only_ids": 0, "all": 0, **({"filters": _filters(filters)} if filters else {})}
        return self._get("/images/json", params)

    def containers(self, all: bool = False, filters: dict[str, Any] | None = None) -> list[dict[str, Any]]:  # noqa: A002 - the SDK's name
        params = {
            "limit": -1,
            "all": 1 if all else 0,
            "size": 0,
            "trunc_cmd": 0,
            **({"filters": _filters(filters)} if filters else {}),
        }
        return self._get("/containers/json", params)

    def _get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        target = f"{path}?{urlencode(params)}" if params else path
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.path)
            status, reason, body = http_wire.get(sock, "localhost", target, {"Accept": "application/json"})
        except (OSError, http_wire.MalformedAnswer) as exc:
            raise EngineUnreachable(f"{self.path}: {type(exc).__name__}: {exc}") from exc
        finally:
            sock.close()
        if status >= 400:
            raise EngineApiError(status, reason, _explanation(body))
        return json.loads(body)


def _quoted(name: str) -> str:
    return quote(name, safe="/:")  # as the SDK quotes a name or id into a path


def _filters(filters: dict[str, Any]) -> str:
    """As docker.utils.convert_filters: every value a list of strings (a boolean value: 'true'/'false')."""
    converted = {}
    for key, value in filters.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        converted[key] = [v if isinstance(v, str) else str(v) for v in (value if isinstance(value, list) else [value])]
    return json.dumps(converted)


def _explanation(body: bytes) -> str:
    text = body.decode(errors="replace").strip()
    try:
        return str(json.loads(text).get("message", text))
    except (ValueError, AttributeError):
        return text
