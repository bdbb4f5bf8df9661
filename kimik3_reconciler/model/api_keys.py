"""An API key file's keys as llama-server reads them (`--api-key-file`), and why a file holds none it can use; PURE.

llama-server (common/arg.cpp) takes every line of the file (std::getline: split on "\n" only, a "\r" stays) that
is not empty and does not start with '#', byte for byte. kimik3's own clients (verify, the exporter) must send a
key the server holds, so all of them read the file through `api_keys`."""

from __future__ import annotations

import re

# A key goes into an `Authorization: Bearer` header: whitespace or a control character there is either refused by
# the HTTP client or not what a user's client sends (a CRLF file leaves "\r" on every key: every request is 401).
_KEY = re.compile(r"[\x21-\x7e]+")
# The keys llama-server can match at all when a client sends `Authorization: Bearer <key>`: cpp-httplib takes a
# header value of visible characters with spaces or tabs inside (vendor/cpp-httplib: is_field_content) and drops
# trailing ones before the server compares the rest byte for byte (tools/server/server-http.cpp). ASCII only: the
# file's bytes are UTF-8, while an HTTP client sends a str header as latin-1 (http.client), so no other key
# arrives as the server holds it. Wider than _KEY on purpose: `key_file_problem` refuses a key with a space for
# the users' clients before a launch, but a server launched with one before that rule (or by hand) does accept
# it, and kimik3's own clients must keep reading it.
_SENDABLE = re.compile(r"[\x20\x09\x21-\x7e]*[\x21-\x7e]")


def sendable_key(key: str | None) -> str | None:
    """`key` when llama-server can match it as sent in an `Authorization: Bearer` header, else None (sending it
    would only be a 401, or an error in the HTTP client)."""
    return key if key is not None and _SENDABLE.fullmatch(key) else None


def sent_key(data: bytes) -> str | None:
    """The key kimik3's own clients send from a key file's bytes: its first key as llama-server reads the file (bytes
    split on "\n" only: a text-mode read would turn a CRLF key into one the server does not hold, it keeps the "\r"),
    where the server can match it as sent; None for a file with no such key or not UTF-8."""
    try:
        return sendable_key(next(iter(api_keys(data.decode("utf-8"))), None))
    except UnicodeDecodeError:
        return None


def bearer(api_key: str | None) -> dict[str, str]:
    """The request header that carries `api_key` ({} without one)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def api_keys(text: str) -> tuple[str, ...]:
    """The keys llama-server takes from a key file's text, in order."""
    return tuple(line for line in text.split("\n") if line and not line.startswith("#"))


def key_file_problem(text: str, server: str) -> str | None:
    """Why `server` (the engine's server process, as messages name it: llama-server) would not be protected by this
    key file (or kimik3 could not send its key), or None. Never names a key: the message goes to the terminal and
    the logs."""
    keys = api_keys(text)
    if not keys:
        # llama-server with --api-key-file and no key in it serves everyone: the profile asked for a key.
        return (
            f"holds no key (only empty or '#' lines): {server} would start without one and answer anyone "
            "who reaches its port; write the key on a line of its own"
        )
    for number, line in enumerate(text.split("\n"), start=1):
        if line in keys and not _KEY.fullmatch(line):
            return (
                f"line {number}: a key holds whitespace, a carriage return (a CRLF file?) or a non-ASCII "
                f"character: {server} compares the line byte for byte, so clients sending the key as typed "
                "are refused (401); write each key as printable ASCII on a line of its own, LF line endings"
            )
    return None
