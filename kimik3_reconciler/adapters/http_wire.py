"""One HTTP/1.1 GET on a connected socket: the Docker reads and the /health probe every plan makes.

`http.client` would answer them as fast, but importing it costs a no-op plan ~20 ms on a 2-core machine (it
imports `email` to parse headers and `ssl` for HTTPS, neither used here). This sends what
`http.client.HTTPConnection.request("GET", ...)` sends (request line, Host, Accept-Encoding: identity, the
caller's headers) and reads the answer's status, headers and body (Content-Length, chunked, or up to the
close). Anything it cannot read as HTTP is a `MalformedAnswer`, as http.client's HTTPException was.
"""

from __future__ import annotations

import socket

_LIMIT = 65536  # longest status or header line accepted (http.client's _MAXLINE)


class MalformedAnswer(Exception):
    """The peer answered something that is not an HTTP/1.x response (or closed halfway through one)."""


def get(
    sock: socket.socket, host: str, target: str, headers: dict[str, str] | None = None, body: bool = True
) -> tuple[int, str, bytes]:
    """(status, reason, body) of `GET target` on `sock`; `body=False`: the status alone (the body is not read)."""
    lines = [
        f"GET {target} HTTP/1.1",
        f"Host: {host}",
        "Accept-Encoding: identity",
        *(f"{name}: {value}" for name, value in (headers or {}).items()),
    ]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    with sock.makefile("rb") as reader:
        while True:
            status, reason = _status(reader)
            fields = _headers(reader)
            if status != 100:  # a 100 Continue is followed by the real answer
                break
        if not body:
            return status, reason, b""
        return status, reason, _body(reader, fields, status)


def _line(reader) -> bytes:  # noqa: ANN001 - a socket's binary file
    line = reader.readline(_LIMIT + 1)
    if len(line) > _LIMIT:
        raise MalformedAnswer("a header line over 64 KiB")
    return line


def _status(reader) -> tuple[int, str]:  # noqa: ANN001
    line = _line(reader)
    if not line:
        raise MalformedAnswer("the connection closed without an answer")
    version, _, rest = line.decode("latin-1").rstrip("\r\n").partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
        raise MalformedAnswer(f"not an HTTP status line: {line[:80]!r}")
    return int(code), reason.strip()


def _headers(reader) -> dict[str, str]:  # noqa: ANN001
    fields: dict[str, str] = {}
    while True:
        line = _line(reader)
        if line in (b"\r\n", b"\n", b""):
            return fields
        name, colon, value = line.decode("latin-1").partition(":")
        if not colon:
            raise MalformedAnswer(f"not a header line: {line[:80]!r}")
        fields[name.strip().lower()] = value.strip()


def _body(reader, fields: dict[str, str], status: int) -> bytes:  # noqa: ANN001
    if status in (204, 304) or 100 <= status < 200:
        return b""
    if "chunked" in fields.get("transfer-encoding", "").lower():
        chunks = []
        while True:
            size_line = _line(reader).split(b";")[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                raise MalformedAnswer(f"not a chunk size: {size_line[:20]!r}") from None
            if size == 0:
                while _line(reader) not in (b"\r\n", b"\n", b""):  # trailers
                    pass
                return b"".join(chunks)
            chunks.append(_exactly(reader, size))
            _exactly(reader, 2)  # the CRLF after each chunk
    if "content-length" in fields:
        try:
            length = int(fields["content-length"])
        except ValueError:
            raise MalformedAnswer(f"Content-Length {fields['content-length']!r}") from None
        return _exactly(reader, length)
    return reader.read()  # neither: the body ends when the server closes


def _exactly(reader, size: int) -> bytes:  # noqa: ANN001
    data = reader.read(size)
    if len(data) != size:
        raise MalformedAnswer(f"the connection closed {size - len(data)} bytes short")
    return data
