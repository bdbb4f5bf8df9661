"""Seed 001's monitoring list and seed 000's speculation loss, as the exporter and `status --watch` show them
(issue 27 items 4 and 8): the prompt-cache hit rate from llama-server's counters and from the replies'
`timings` the proxy sees, and a row when the server drafts while 4 or more requests decode together."""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry

from kimik3_reconciler.exporter.proxy_observe import ProxyMetrics
from kimik3_reconciler.exporter.registry import exposition
from kimik3_reconciler.exporter.watch import samples_of, watch_rows

LABELS = {"profile": "k3-test", "quant": "UD-Q2_K_XL", "build": "b", "fingerprint": "f"}
KEYS = {**LABELS, "route": "/v1/chat/completions", "model": "default"}
# The shape of llama-server's `timings` (b11434 tools/server/server-common.cpp `server_slot_stats::to_json`), the
# numbers made up. Streamed, it rides on the last event (server-task.cpp: `deltas.back()["timings"]`).
TIMINGS = {
    "cache_n": 300,
    "prompt_n": 100,
    "prompt_ms": 50.0,
    "prompt_per_token_ms": 0.5,
    "prompt_per_second": 2000.0,
    "predicted_n": 3,
    "predicted_ms": 30.0,
}


def sse(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def trace_of(
    registry: CollectorRegistry,
    streaming: bool,
    chunks: list[bytes],
    status: int = 200,
    metrics: ProxyMetrics | None = None,
) -> None:
    trace = (metrics or ProxyMetrics(registry, LABELS)).start("/v1/chat/completions", b"{}")
    trace.response(status, "text/event-stream" if streaming else "application/json")
    for chunk in chunks:
        trace.chunk(chunk)
    trace.finish()


@pytest.mark.parametrize("streaming", [True, False])
def test_the_proxy_counts_cached_and_evaluated_prompt_tokens_from_the_replys_timings(streaming: bool) -> None:
    registry = CollectorRegistry(auto_describe=False)
    if streaming:  # llama-server puts `timings` on the last event (finish_reason set, empty delta)
        last = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "timings": TIMINGS}
        chunks = [sse({"choices": [{"index": 0, "delta": {"content": "hi"}}]}), sse(last), b"data: [DONE]\n\n"]
    else:
        chunks = [json.dumps({"choices": [{"index": 0, "message": {"content": "hi"}}], "timings": TIMINGS}).encode()]
    trace_of(registry, streaming, chunks)
    value = registry.get_sample_value
    assert value("kimik3_proxy_prompt_cached_tokens_total", KEYS) == 300
    assert value("kimik3_proxy_prompt_evaluated_tokens_total", KEYS) == 100
    rows = {(r.section, r.name): r.value for r in watch_rows({}, samples_of(exposition(registry)), 1.0)}
    assert rows[("latency", "prompt cache hits")] == "75 % of prompt tokens in replies since the exporter started"


def test_a_reply_without_timings_or_a_failed_one_counts_no_prompt_tokens() -> None:
    registry = CollectorRegistry(auto_describe=False)
    metrics = ProxyMetrics(registry, LABELS)
    trace_of(registry, False, [json.dumps({"choices": []}).encode()], metrics=metrics)
    trace_of(
        registry,
        False,
        [json.dumps({"error": {"message": "x"}, "timings": TIMINGS}).encode()],
        status=500,
        metrics=metrics,
    )
    assert registry.get_sample_value("kimik3_proxy_prompt_cached_tokens_total", KEYS) is None


SERVER = """# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total {prompt}
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total {cached}
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing {processing}
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total {drafts}
"""


def rows(before: dict, now: dict) -> dict:
    return {
        (r.section, r.name): r.value
        for r in watch_rows(samples_of(SERVER.format(**before)), samples_of(SERVER.format(**now)), 2.0)
    }


def test_the_watch_shows_the_servers_cache_hit_rate_this_interval() -> None:
    """llama-server counts prompt tokens it evaluated (prompt_tokens_total, "excluding cached tokens") and those
    it took from its cache (prompt_tokens_cached_total) apart: 600 cached and 200 evaluated in the interval is 75 %."""
    seen = rows(
        {"prompt": 100, "cached": 0, "processing": 1, "drafts": 0},
        {"prompt": 300, "cached": 600, "processing": 1, "drafts": 0},
    )
    assert seen[("server", "prompt cache hits")] == "75 % of prompt tokens this interval"
    assert ("server", "speculation") not in seen  # no draft in the interval: nothing to say


def test_drafting_with_four_requests_decoding_together_is_where_the_seed_measured_the_loss() -> None:
    busy = rows(
        {"prompt": 0, "cached": 0, "processing": 4, "drafts": 10},
        {"prompt": 0, "cached": 0, "processing": 4.5, "drafts": 30},
    )
    assert busy[("server", "speculation")].startswith(
        "drafting with 4.5 requests decoding together (this interval's "
        "mean): seed 000 measured a loss at 4 concurrent requests"
    )
    quiet = rows(
        {"prompt": 0, "cached": 0, "processing": 1, "drafts": 10},
        {"prompt": 0, "cached": 0, "processing": 1, "drafts": 30},
    )
    assert quiet[("server", "speculation")] == "drafting, 1.0 requests decoding together (pays below 4, seed 000)"
