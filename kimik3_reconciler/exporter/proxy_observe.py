"""What the latency proxy records, without any HTTP: per request, the route and model, when the first and
each later streamed event came (TTFT, inter-token latency), the end (e2e), the status, and tool calls that
did not parse. The proxy (adapters/latency_proxy.py) feeds it bytes as they pass; it never changes them.

Streams are read as server-sent events: every `data:` event with a delta is one decoded step (llama-server
sends one event per token). Tool-call parse failures seen in responses: the server's parser refusing the
output (an error reply or an error event), arguments that are not a JSON object once all their fragments
arrived, or tool-call markup left in the content (verify/checks.py's signs, on live traffic).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from prometheus_client import Counter, Histogram
from prometheus_client.registry import CollectorRegistry

from kimik3_reconciler.verify.checks import CALL_MARKUP, UNPARSED_OUTPUT

ROUTES = (
    "/v1/chat/completions",
    "/chat/completions",
    "/v1/completions",
    "/completions",
    "/completion",
    "/v1/embeddings",
    "/embeddings",
    "/v1/messages",
    "/v1/responses",
    "/infill",
    "/tokenize",
    "/detokenize",
    "/apply-template",
    "/v1/models",
    "/models",
    "/health",
    "/v1/health",
    "/metrics",
    "/slots",
    "/props",
)
MAX_MODELS = 16  # distinct model labels kept; more become "other" (a client's typo must not grow the series)
MAX_BODY = 4 << 20  # a non-streamed reply is kept up to this size to look for tool calls
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5)
E2E_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1800)


def route_of(path: str) -> str:
    return path if path in ROUTES else "other"


def unparsed_arguments(arguments: str) -> bool:
    try:
        return not isinstance(json.loads(arguments or "{}"), dict)
    except ValueError:
        return True


class ProxyMetrics:
    """The proxy's series, with the deployment's labels plus route and model."""

    def __init__(self, registry: CollectorRegistry, labels: Mapping[str, str]):
        self.labels = dict(labels)
        names = [*self.labels, "route", "model"]
        self.ttft = Histogram(
            "kimik3_proxy_ttft_seconds",
            "time to the first streamed event (or the whole reply when not streamed)",
            names,
            registry=registry,
            buckets=TTFT_BUCKETS,
        )
        self.itl = Histogram(
            "kimik3_proxy_itl_seconds",
            "time between streamed events (inter-token latency)",
            names,
            registry=registry,
            buckets=ITL_BUCKETS,
        )
        self.e2e = Histogram(
            "kimik3_proxy_e2e_seconds",
            "request start to the reply's last byte",
            names,
            registry=registry,
            buckets=E2E_BUCKETS,
        )
        self.requests = Counter(
            "kimik3_proxy_requests", "requests through the proxy, by status code", [*names, "code"], registry=registry
        )
        self.errors = Counter(
            "kimik3_proxy_errors",
            "failed requests: upstream (no answer), http_4xx, http_5xx, "
            "stream (an error event), client_gone (closed before the end)",
            [*names, "kind"],
            registry=registry,
        )
        self.tool_parse = Counter(
            "kimik3_proxy_tool_call_parse_failures",
            "replies whose tool call did not parse "
            "(parser refusal, arguments not a JSON object, markup left in the content)",
            [*names, "kind"],
            registry=registry,
        )
        self.tokens = Counter(
            "kimik3_proxy_streamed_events",
            "streamed events with a delta (about one per token)",
            names,
            registry=registry,
        )
        # Seed 001 lists the cache hit rate: llama-server's reply `timings` say how many prompt tokens it took from
        # its cache (cache_n) and how many it evaluated (prompt_n).
        self.prompt_cached = Counter(
            "kimik3_proxy_prompt_cached_tokens",
            "prompt tokens the server reused from its cache (the reply's timings.cache_n)",
            names,
            registry=registry,
        )
        self.prompt_evaluated = Counter(
            "kimik3_proxy_prompt_evaluated_tokens",
            "prompt tokens the server evaluated (the reply's timings.prompt_n)",
            names,
            registry=registry,
        )
        self._models: set[str] = set()

    def model_label(self, body: bytes) -> str:
        try:
            model = json.loads(body).get("model") if body[:1] == b"{" else None
        except (ValueError, AttributeError):
            model = None
        model = str(model)[:64] if model else "default"
        if model not in self._models and len(self._models) >= MAX_MODELS:
            return "other"
        self._models.add(model)
        return model

    def start(self, path: str, body: bytes) -> RequestTrace:
        """The request's clock starts now; its model label is parsed from `body` on first use (after the
        request went upstream), so the JSON parse is not on the request's path."""
        return RequestTrace(self, route_of(path), body, time.perf_counter())


class RequestTrace:
    """One request as it passes: `response(status, content_type)`, `chunk(bytes)` per piece, `finish()`."""

    def __init__(self, metrics: ProxyMetrics, route: str, body: bytes, started: float):
        self.metrics, self.route, self.started = metrics, route, started
        self._body: bytes | None = body
        self._keys: dict[str, str] | None = None
        self.status, self.streaming = 0, False
        self.first: float | None = None
        self.last: float | None = None
        self.pending = b""  # a partial SSE line between chunks
        self.body = bytearray()  # a non-streamed reply (up to MAX_BODY)
        self.call_args: dict[int, str] = {}  # streamed tool-call argument fragments by index
        self.content_tail = ""  # the streamed content's last characters (markup may span events)
        self.leaked = False
        self.stream_error = False
        self.done = False  # the stream's `data: [DONE]` went by
        self._itl = self._tokens = None  # this request's labelled children, looked up once (not per token)

    @property
    def keys(self) -> dict[str, str]:
        if self._keys is None:
            self._keys = {**self.metrics.labels, "route": self.route, "model": self.model}
        return self._keys

    @property
    def model(self) -> str:
        if self._body is not None:
            self._model, self._body = self.metrics.model_label(self._body), None
        return self._model

    def response(self, status: int, content_type: str) -> None:
        self.status, self.streaming = status, "text/event-stream" in content_type

    def chunk(self, data: bytes) -> None:
        now = time.perf_counter()
        if not self.streaming:
            if self.first is None:
                self.first = now
            if len(self.body) < MAX_BODY:
                self.body += data[: MAX_BODY - len(self.body)]
            return
        if not self.pending and data.startswith(b"data:") and data.endswith(b"\n\n") and data.count(b"\n") == 2:
            # The common case, one event per chunk as llama-server writes it: no join, no split.
            events = self._event(data[5:-2].strip(), now)
        else:
            lines = (self.pending + data).split(b"\n")
            self.pending = lines.pop()
            events = sum(self._event(line[5:].strip(), now) for line in lines if line.startswith(b"data:"))
        if events:
            self._tokens.inc(events)  # once per chunk: a chunk holding several events counts them all

    def _event(self, payload: bytes, now: float) -> int:
        """1 for an event with a delta (a decoded step), 0 for [DONE] or an empty one."""
        if not payload or payload == b"[DONE]":
            self.done = self.done or payload == b"[DONE]"
            return 0
        if self.first is None:
            self.first = now
            keys = self.keys
            self.metrics.ttft.labels(**keys).observe(now - self.started)
            self._itl, self._tokens = self.metrics.itl.labels(**keys), self.metrics.tokens.labels(**keys)
        elif self.last is not None:
            self._itl.observe(now - self.last)
        self.last = now
        # Parsed only when it can matter: a tool call, an error, or content (for leaked markup).
        if b'"tool_calls"' in payload or b'"error"' in payload or b"<" in payload or b'"timings"' in payload:
            try:
                event = json.loads(payload)
            except ValueError:
                return 1
            self._look_at(event)
        return 1

    def _look_at(self, event: dict[str, Any]) -> None:
        if isinstance(event, dict) and event.get("error"):
            self.stream_error = True
        if isinstance(event, dict) and isinstance(event.get("timings"), dict):
            self._timings(event["timings"])
        for choice in (event.get("choices") or []) if isinstance(event, dict) else []:
            delta = choice.get("delta") or {}
            for call in delta.get("tool_calls") or []:
                index = int(call.get("index", 0))
                self.call_args[index] = self.call_args.get(index, "") + str(
                    (call.get("function") or {}).get("arguments") or ""
                )
            content = delta.get("content")
            if isinstance(content, str) and content:
                self.content_tail = (self.content_tail + content)[-64:]
                self.leaked = self.leaked or any(m in self.content_tail for m in CALL_MARKUP)

    def _timings(self, timings: dict[str, Any]) -> None:
        """One reply's prompt tokens: from the cache (cache_n) and evaluated (prompt_n); llama-server sends
        them once per reply (the last streamed event, or the whole reply)."""
        cached, evaluated = timings.get("cache_n"), timings.get("prompt_n")
        if isinstance(cached, int) and isinstance(evaluated, int) and cached >= 0 and evaluated >= 0:
            self.metrics.prompt_cached.labels(**self.keys).inc(cached)
            self.metrics.prompt_evaluated.labels(**self.keys).inc(evaluated)

    def finish(self, upstream_failed: bool = False, client_gone: bool = False) -> None:
        """`client_gone`: writing to the client failed; after `[DONE]` that is a client that did not wait for
        the end of the stream (the openai client), not an error."""
        now = time.perf_counter()
        m, keys = self.metrics, self.keys
        if client_gone and not self.done:
            m.errors.labels(**keys, kind="client_gone").inc()
        if upstream_failed:
            m.errors.labels(**keys, kind="upstream").inc()
            m.requests.labels(**keys, code="502").inc()
            return
        if not self.streaming and self.first is not None:
            m.ttft.labels(**keys).observe(self.first - self.started)
        m.e2e.labels(**keys).observe(now - self.started)
        if self.status >= 500:
            m.errors.labels(**keys, kind="http_5xx").inc()
        elif self.status >= 400:
            m.errors.labels(**keys, kind="http_4xx").inc()
        if self.stream_error:
            m.errors.labels(**keys, kind="stream").inc()
        if not self.streaming and self.status == 200 and b'"timings"' in self.body:
            try:
                reply = json.loads(bytes(self.body))
            except ValueError:
                reply = None
            if isinstance(reply, dict) and isinstance(reply.get("timings"), dict):
                self._timings(reply["timings"])
        kind = self._tool_parse_failure()
        if kind:
            m.tool_parse.labels(**keys, kind=kind).inc()
        m.requests.labels(**keys, code=str(self.status)).inc()  # last: a counted request has all its series

    def _tool_parse_failure(self) -> str | None:
        if self.streaming:
            if any(unparsed_arguments(a) for a in self.call_args.values()):
                return "arguments"
            return "markup" if self.leaked else ("parser" if self.stream_error and self.call_args else None)
        if self.route not in ("/v1/chat/completions", "/chat/completions"):
            return None
        try:
            reply = json.loads(bytes(self.body))
        except ValueError:
            return None
        if not isinstance(reply, dict):
            return None
        if self.status >= 500:
            message = str((reply.get("error") or {}).get("message", "")) if isinstance(reply.get("error"), dict) else ""
            return "parser" if UNPARSED_OUTPUT in message or "parse" in message.lower() else None
        for choice in reply.get("choices") or []:
            message = choice.get("message") or {}
            for call in message.get("tool_calls") or []:
                if unparsed_arguments(str((call.get("function") or {}).get("arguments") or "")):
                    return "arguments"
            if any(m in str(message.get("content") or "") for m in CALL_MARKUP):
                return "markup"
        return None
