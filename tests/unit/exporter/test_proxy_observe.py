"""What the latency proxy records from the bytes as they pass (exporter/proxy_observe.py), however the server's
stream is cut into chunks: one event per chunk (llama-server's way, the fast path), several in one chunk, one
event split across chunks. The same events give the same counts, TTFT once, ITL for every later event."""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry

from kimik3_reconciler.exporter.proxy_observe import ProxyMetrics

LABELS = {"profile": "k3-test", "quant": "UD-Q2_K_XL", "build": "b", "fingerprint": "f"}
KEYS = {**LABELS, "route": "/v1/chat/completions", "model": "default"}


def event(delta: dict) -> bytes:
    return (
        b"data: "
        + json.dumps({"choices": [{"index": 0, "delta": delta}], "object": "chat.completion.chunk"}).encode()
        + b"\n\n"
    )


STREAM = [
    event({"role": "assistant", "content": None}),
    *(event({"content": f" {i}"}) for i in range(5)),
    b"data: [DONE]\n\n",
]
EVENTS = len(STREAM) - 1  # [DONE] is no decoded step


def one_per_chunk(stream: list[bytes]) -> list[bytes]:
    return stream


def all_in_one(stream: list[bytes]) -> list[bytes]:
    return [b"".join(stream)]


def split_events(stream: list[bytes]) -> list[bytes]:
    """Every event cut in two, the cut inside its JSON, and the halves joined to the neighbours' pieces."""
    whole = b"".join(stream)
    return [whole[i : i + 37] for i in range(0, len(whole), 37)]


def crlf(stream: list[bytes]) -> list[bytes]:
    return [chunk.replace(b"\n", b"\r\n") for chunk in stream]


def observed(chunks: list[bytes], registry: CollectorRegistry | None = None) -> tuple[dict, object]:
    registry = registry or CollectorRegistry(auto_describe=False)
    trace = ProxyMetrics(registry, LABELS).start("/v1/chat/completions", b"{}")
    trace.response(200, "text/event-stream")
    for chunk in chunks:
        trace.chunk(chunk)
    trace.finish()
    value = registry.get_sample_value
    return {
        "events": value("kimik3_proxy_streamed_events_total", KEYS),
        "ttft": value("kimik3_proxy_ttft_seconds_count", KEYS),
        "itl": value("kimik3_proxy_itl_seconds_count", KEYS),
        "requests": value("kimik3_proxy_requests_total", {**KEYS, "code": "200"}),
    }, trace


@pytest.mark.parametrize("cut", [one_per_chunk, all_in_one, split_events, crlf])
def test_the_same_stream_counts_the_same_however_it_is_chunked(cut):
    counts, trace = observed(cut(STREAM))
    assert counts == {"events": EVENTS, "ttft": 1, "itl": EVENTS - 1, "requests": 1}
    assert trace.done and trace.pending == b""


def test_a_tool_calls_fragments_are_joined_across_chunks_and_a_bad_one_counted():
    calls = [
        event({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": part}}]})
        for part in ('{"city": ', '"Paris"')
    ]  # never closed: not a JSON object
    registry = CollectorRegistry(auto_describe=False)
    counts, trace = observed(split_events([*calls, b"data: [DONE]\n\n"]), registry)
    assert trace.call_args == {0: '{"city": "Paris"'}
    assert counts["events"] == 2
    assert registry.get_sample_value("kimik3_proxy_tool_call_parse_failures_total", {**KEYS, "kind": "arguments"}) == 1
