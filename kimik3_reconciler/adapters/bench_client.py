"""The load generator behind `kimik3 bench` (LoadPort): asyncio + httpx streaming, on the engine's wire
(engines/base.py LoadWire).

llama-server (wire `native`): requests go to the native `/completion` endpoint with the prompt as token ids (exact length: the ids come
from the server's own `/tokenize`), `cache_prompt: false` (a reused prefix would make TTFT a cache hit),
`ignore_eos` (the output length is exact whatever the weights say) and `return_tokens` (every streamed
chunk names the token ids it carries, so a token whose text is empty still counts). Clock:
`time.perf_counter()` (monotonic, highest resolution). TTFT = first chunk carrying a token - the instant
just before the request is written. The final chunk's `timings` is the server's own view of the request.

An OpenAI server (`openai`: vLLM; SGLang's wire, not run here): `/tokenize {prompt}` for the ids, then streamed
`/v1/completions` with the same token-id prompt, `max_tokens` with `ignore_eos` (vLLM's extra parameter: exact
output length) and `stream_options.continuous_usage_stats` (every chunk carries the running completion_tokens: the
counterpart of llama-server's tokens_predicted). It has no per-request timings: the level's cross-check is the
`/metrics` counter alone. Its prefix cache stays on (vLLM's is a launch knob); a fresh `cache_salt` per request
keeps every request out of it (the prompts repeat: the warm-up sends the bench's first ones).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from kimik3_reconciler.errors import PermanentError, TransientError
from kimik3_reconciler.model.api_keys import bearer
from kimik3_reconciler.ports import LoadLevel

if TYPE_CHECKING:  # httpx (and the rich it pulls in) is imported where a bench runs: a no-op plan never loads it
    import httpx

    from kimik3_reconciler.model.bench import RequestSample

_TIMINGS = ("prompt_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_ms", "predicted_per_second")


class HttpLoad:
    """LoadPort over httpx: `/tokenize`, `/metrics`, and closed-loop streamed sweeps."""

    def __init__(self, timeout_s: float = 600.0):
        self.timeout_s = timeout_s

    def tokenize(self, base_url: str, api_key: str | None, text: str, wire: str = "native") -> list[int]:
        import httpx

        body = (
            {"content": text, "add_special": False}
            if wire == "native"
            else {"prompt": text, "add_special_tokens": False}
        )
        try:
            reply = httpx.post(f"{base_url}/tokenize", json=body, headers=bearer(api_key), timeout=60)
            reply.raise_for_status()
        except httpx.HTTPError as exc:
            raise TransientError(f"{base_url}/tokenize: {exc}") from None
        return list(reply.json()["tokens"])

    def metrics(self, base_url: str, api_key: str | None) -> str | None:
        """The Prometheus text of `/metrics`, None when the server does not serve it."""
        import httpx

        try:
            reply = httpx.get(f"{base_url}/metrics", headers=bearer(api_key), timeout=30)
        except httpx.HTTPError:
            return None
        return reply.text if reply.status_code == 200 else None

    def run_level(self, level: LoadLevel) -> tuple[list[RequestSample], float]:
        """Send the level's prompts with its concurrency in flight (closed loop); the samples and the wall time."""
        import asyncio  # a bench run only: a no-op plan builds this port and never calls it

        return asyncio.run(self._level(level))

    async def _level(self, level: LoadLevel) -> tuple[list[RequestSample], float]:
        import asyncio

        import httpx

        base_url, api_key, prompts, wire = level.base_url, level.api_key, level.prompts, level.wire
        output_tokens, concurrency = level.output_tokens, level.concurrency
        model = _served_model(base_url, api_key) if wire == "openai" else None

        queue = list(reversed(prompts))
        samples: list[RequestSample] = []
        # A connection per request: llama-server may close a kept-alive connection just as the next request
        # is written on it (seen: "Server disconnected without sending a response"); loopback connects take
        # microseconds, and they are part of what a new client's TTFT is anyway.
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=0)
        async with httpx.AsyncClient(
            base_url=base_url,
            headers=bearer(api_key),
            limits=limits,
            timeout=httpx.Timeout(self.timeout_s, connect=30),
        ) as client:

            async def worker() -> None:
                while queue:  # closed loop: the next request leaves when this one is done
                    prompt = queue.pop()
                    samples.append(
                        await (
                            _one(client, prompt, output_tokens)
                            if model is None
                            else _one_openai(client, model, prompt, output_tokens)
                        )
                    )

            started = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            wall = time.perf_counter() - started
        return samples, wall


class _Read(NamedTuple):
    """What one streamed chunk says: the server's running count of generated tokens, whether it is the closing
    chunk (which carries the total, and on llama-server its timings), and those timings."""

    predicted: int
    final: bool = False
    timings: dict[str, float] | None = None


class _StreamError(Exception):
    """The server reported a failure inside the stream (a data line, after the 200)."""


def _native_chunk(chunk: dict[str, Any]) -> _Read:
    if chunk.get("stop"):
        timings = {k: float(v) for k, v in (chunk.get("timings") or {}).items() if k in _TIMINGS}
        return _Read(int(chunk.get("tokens_predicted") or 0), True, timings)
    # The server's running count, not the ids in the chunk: a token whose text is an incomplete UTF-8 sequence is
    # held back and sent with a later one (byte-level vocabularies do this).
    return _Read(int(chunk.get("tokens_predicted") or len(chunk.get("tokens") or ())))


def _openai_chunk(chunk: dict[str, Any]) -> _Read:
    if "error" in chunk:  # vLLM reports a failure mid-stream as a data line: not a short success
        raise _StreamError(f"stream error: {json.dumps(chunk['error'])}")
    # The running count from the usage every chunk carries; the last chunk (no choices) is the total.
    return _Read(int((chunk.get("usage") or {}).get("completion_tokens") or 0), not chunk.get("choices"))


async def _one(client: httpx.AsyncClient, prompt: list[int], output_tokens: int) -> RequestSample:
    body = {
        "prompt": prompt,
        "n_predict": output_tokens,
        "stream": True,
        "cache_prompt": False,
        "ignore_eos": True,
        "return_tokens": True,
        "temperature": 0.0,
    }
    return await _streamed(client, "/completion", body, len(prompt), _native_chunk)


async def _one_openai(client: httpx.AsyncClient, model: str, prompt: list[int], output_tokens: int) -> RequestSample:
    """One streamed /v1/completions request; TTFT and the token count as `_one` measures them on llama-server."""
    # cache_salt (vLLM): a fresh one per request keeps it out of every cached prefix, the warm-up's and an earlier
    # bench's included (they send the same prompts): llama-server's cache_prompt false, on this wire.
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": output_tokens,
        "stream": True,
        "ignore_eos": True,
        "temperature": 0.0,
        "cache_salt": uuid.uuid4().hex,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    return await _streamed(client, "/v1/completions", body, len(prompt), _openai_chunk)


async def _streamed(
    client: httpx.AsyncClient,
    path: str,
    body: dict[str, Any],
    prompt_tokens: int,
    read: Callable[[dict[str, Any]], _Read],
) -> RequestSample:
    """POST `body` to `path` and time the stream: TTFT at the first chunk whose running count moved, the last such
    chunk ends decode; `read` says what a chunk of this wire holds."""
    import httpx

    from kimik3_reconciler.model.bench import RequestSample

    first = last = None
    first_n = streamed = tokens = 0
    timings: dict[str, float] = {}
    error = None
    sent = time.perf_counter()
    try:
        async with client.stream("POST", path, json=body) as reply:
            if reply.status_code != 200:
                text = (await reply.aread()).decode(errors="replace")[:200]
                return RequestSample(sent, None, None, 0, prompt_tokens, f"HTTP {reply.status_code}: {text}")
            async for line in reply.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                now = time.perf_counter()
                said = read(json.loads(line[6:]))
                if said.final:
                    timings = said.timings or {}
                    tokens = max(tokens, said.predicted)
                    continue
                if said.predicted > streamed:
                    if first is None:
                        first, first_n = now, said.predicted
                    last, streamed = now, said.predicted
                    tokens = max(tokens, streamed)
    except (httpx.HTTPError, json.JSONDecodeError, _StreamError) as exc:
        error = (str(exc) if isinstance(exc, _StreamError) else f"{type(exc).__name__}: {exc}")[:200]
    return RequestSample(sent, first, last, tokens, prompt_tokens, error, timings, first_n, streamed)


def _served_model(base_url: str, api_key: str | None) -> str:
    """The model name an OpenAI server serves (its /v1/models' first id): /v1/completions names it."""
    import httpx

    try:
        reply = httpx.get(f"{base_url}/v1/models", headers=bearer(api_key), timeout=60)
        reply.raise_for_status()
        return str(reply.json()["data"][0]["id"])
    except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
        raise TransientError(f"{base_url}/v1/models: {exc}") from None


def check_reachable(base_url: str) -> None:
    """PermanentError when nothing answers at base_url (bench refuses before building prompts)."""
    import httpx

    try:
        httpx.get(f"{base_url}/health", timeout=10)
    except httpx.HTTPError as exc:
        raise PermanentError(f"{base_url}: {exc}") from None
