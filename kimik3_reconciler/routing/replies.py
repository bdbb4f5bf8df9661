"""What kimik3's router reads from the bytes it passes, PURE: a request's conversation prefixes (the keys the `slots`
policy routes by, routing/slot_route.py) and a reply's prompt-cache counts (what the server says it reused, fed
back to the policy). Request bodies and prompts are only hashed here: nothing of them is kept, logged or exported.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kimik3_reconciler.routing.slot_route import prefix_keys

CHAT = frozenset({"/v1/chat/completions", "/chat/completions"})
COMPLETIONS = frozenset({"/v1/completions", "/completions"})
BLOCK = 1024  # a completion prompt's keys: one per this many characters (the turn that extends it finds them)
MAX_BODY = 4 << 20  # a non-streamed reply kept up to this size to read its counts (a reply is usually a few KiB)


def request_keys(path: str, body: bytes) -> list[str] | None:
    """The prefixes of the conversation a request sends, first one its system prompt's; None when it is not a chat or
    completion request with a prompt (the router sends it through smg, which answers it as it would)."""
    if path not in CHAT and path not in COMPLETIONS:
        return None
    try:
        request = json.loads(body)
        if not isinstance(request, dict):
            return None
        if path in CHAT:
            messages = request.get("messages")
            ok = isinstance(messages, list) and messages and all(isinstance(m, dict) for m in messages)
            return prefix_keys(messages) if ok else None
    except (ValueError, RecursionError):
        # smg (then the server) answers a malformed body with its own error; one nested deeper than Python's json
        # reads or writes back (a hostile client) too, rather than the router's 500 and a traceback in its log.
        return None
    prompt = request.get("prompt")
    return block_keys(prompt) if isinstance(prompt, str) and prompt else None


def block_keys(prompt: str) -> list[str]:
    """A completion prompt's keys: a digest of its first BLOCK characters, of its first 2×BLOCK, ... (whole blocks
    only, so the next turn, which extends this prompt, holds the last key of this one); a short prompt: one key."""
    digest = hashlib.sha256()
    keys = []
    for start in range(0, max(BLOCK, len(prompt) - len(prompt) % BLOCK), BLOCK):
        digest.update(prompt[start : start + BLOCK].encode())
        keys.append(digest.copy().hexdigest()[:24])
    return keys


def cache_counts(reply: Any) -> tuple[int, int] | None:
    """(prompt tokens the server took from its cache, tokens it evaluated) from one reply or streamed event:
    llama-server's `timings.cache_n`/`prompt_n`, else OpenAI's `usage.prompt_tokens_details.cached_tokens` of
    `usage.prompt_tokens` (vLLM, SGLang); None when it says neither."""
    if not isinstance(reply, dict):
        return None
    timings = reply.get("timings")
    if isinstance(timings, dict):
        cached, evaluated = timings.get("cache_n"), timings.get("prompt_n")
        if _count(cached) and _count(evaluated):
            return cached, evaluated
    usage = reply.get("usage")
    if isinstance(usage, dict):
        details, prompt = usage.get("prompt_tokens_details"), usage.get("prompt_tokens")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        if _count(cached) and _count(prompt) and cached <= prompt:
            return cached, prompt - cached
    return None


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class ReplyReader:
    """One reply as it passes (the latency proxy's watcher protocol: `response`, `chunk`, `finish`): `counts` once it
    ended. A stream is read as server-sent events, only those that name timings or usage parsed (the last such event
    wins: llama-server sends them with the last one); a whole reply is parsed at its end."""

    def __init__(self) -> None:
        self.status, self.streaming = 0, False
        self.pending = b""  # a partial SSE line between chunks
        self.body = bytearray()
        self.counts: tuple[int, int] | None = None
        self.failed = False

    def response(self, status: int, content_type: str) -> None:
        self.status, self.streaming = status, "text/event-stream" in content_type

    def chunk(self, data: bytes) -> None:
        if not self.streaming:
            if len(self.body) < MAX_BODY:
                self.body += data[: MAX_BODY - len(self.body)]
            return
        lines = (self.pending + data).split(b"\n")
        self.pending = lines.pop()
        for line in lines:
            if line.startswith(b"data:") and (b'"timings"' in line or b'"usage"' in line):
                self._event(line[5:].strip())

    def _event(self, payload: bytes) -> None:
        try:
            counts = cache_counts(json.loads(payload))
        except ValueError:
            return
        if counts is not None:
            self.counts = counts

    def finish(self, upstream_failed: bool = False, client_gone: bool = False) -> None:
        self.failed = upstream_failed
        if upstream_failed or self.status != 200:  # an error says nothing of the server's cache
            self.counts = None
            return
        if not self.streaming and (b'"timings"' in self.body or b'"usage"' in self.body):
            try:
                self.counts = cache_counts(json.loads(bytes(self.body)))
            except ValueError:
                self.counts = None
