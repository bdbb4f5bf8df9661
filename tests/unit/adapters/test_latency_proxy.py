"""The latency proxy (adapters/latency_proxy.py) on real sockets, behind the real openai client: streaming chat,
tools and auth pass unchanged, and what it records (TTFT, ITL, e2e, errors, tool-call parse failures) is
read back from its registry. The upstream is a scripted llama-server look-alike (support/sse_stub.py)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support.ports import free_port
from support.sse_stub import SseStub

from kimik3_reconciler.adapters.latency_proxy import proxy_app
from kimik3_reconciler.exporter.proxy_observe import ProxyMetrics

KEY = "sk-proxy-test-5d8e"
LABELS = {"profile": "k3-test", "quant": "UD-Q2_K_XL", "build": "b", "fingerprint": "f"}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def call(arguments: str) -> dict:
    return {
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
        ]
    }


@pytest.fixture
def proxied() -> Iterator[tuple[SseStub, str, CollectorRegistry]]:
    registry = CollectorRegistry(auto_describe=False)
    metrics = ProxyMetrics(registry, LABELS)
    with SseStub(free_port(), KEY) as upstream:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        runner = web.AppRunner(proxy_app(f"http://127.0.0.1:{upstream.port}", metrics))
        port = free_port()

        async def start() -> None:
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()

        asyncio.run_coroutine_threadsafe(start(), loop).result(10)
        try:
            yield upstream, f"http://127.0.0.1:{port}", registry
        finally:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)


def samples(registry: CollectorRegistry, requests: int) -> dict[tuple[str, tuple], float]:
    """The registry's samples once `requests` requests are recorded: a client stops reading at `[DONE]`, a moment
    before the proxy has written the end of the stream and recorded the request."""

    def read() -> dict[tuple[str, tuple], float]:
        out = {}
        for family in text_string_to_metric_families(generate_latest(registry).decode()):
            for s in family.samples:
                extra = tuple(sorted((k, v) for k, v in s.labels.items() if k not in LABELS))
                out[(s.name, extra)] = s.value
        return out

    for _ in range(250):
        got = read()
        if sum(v for k, v in got.items() if k[0] == "kimik3_proxy_requests_total") >= requests:
            return read()  # once more: one exposition is not atomic
        time.sleep(0.02)
    raise AssertionError(f"the proxy did not record {requests} requests")


def streamed_events(registry: CollectorRegistry) -> float:
    """Events the proxy has timed so far (it counts each after taking its time)."""
    return sum(
        s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
        if s.name == "kimik3_proxy_streamed_events_total"
    )


def client(base: str, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0)


def test_streaming_chat_passes_through_and_is_timed(proxied):
    upstream, base, registry = proxied
    upstream.script = [{"content": "one two three four five"}]
    # Paced: the stub writes the next event only once the proxy has timed the last one. The gaps the proxy times
    # sum to its read of the last event minus its read of the first; unpaced, a busy CPU that delayed the first
    # read more than the last made that less than the stub's sleeps (seen: 0.032 s < 0.036 s, 2 cores loaded).
    upstream.paced_by = lambda sent: streamed_events(registry) >= sent
    stream = client(base).chat.completions.create(
        model="kimi-k3", stream=True, messages=[{"role": "user", "content": "count"}]
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
    assert text == "one two three four five "
    assert upstream.headers_seen[-1]["Authorization"] == f"Bearer {KEY}"  # the key passed unchanged
    got = samples(registry, 1)
    route = (("model", "kimi-k3"), ("route", "/v1/chat/completions"))
    assert got[("kimik3_proxy_ttft_seconds_count", route)] == 1
    assert got[("kimik3_proxy_itl_seconds_count", route)] == 4  # five events, four gaps
    assert got[("kimik3_proxy_itl_seconds_sum", route)] >= 4 * 0.009  # each gap >= gap_s (0.01), clocks apart
    assert got[("kimik3_proxy_e2e_seconds_count", route)] == 1
    assert got[("kimik3_proxy_requests_total", (("code", "200"), *route))] == 1


def test_tools_pass_and_a_bad_tool_call_is_counted_streamed_or_not(proxied):
    upstream, base, registry = proxied
    upstream.script = [
        call('{"city": "Oslo"}'),
        call('{"city": "Oslo"'),
        call("Oslo, please"),
        (500, "The model produced output that does not match the expected Kimi K3 format"),
    ]
    ask = client(base).chat.completions.create
    messages = [{"role": "user", "content": "weather in Oslo?"}]
    good = ask(model="kimi-k3", messages=messages, tools=TOOLS)
    assert good.choices[0].message.tool_calls[0].function.arguments == '{"city": "Oslo"}'
    streamed = ask(model="kimi-k3", messages=messages, tools=TOOLS, stream=True)
    fragments = "".join(c.choices[0].delta.tool_calls[0].function.arguments or "" for c in streamed)
    assert fragments == '{"city": "Oslo"'  # passed as sent: the proxy never repairs a reply
    bad = ask(model="kimi-k3", messages=messages, tools=TOOLS)
    assert bad.choices[0].message.tool_calls[0].function.arguments == "Oslo, please"
    with pytest.raises(openai.InternalServerError):
        ask(model="kimi-k3", messages=messages, tools=TOOLS)
    got = samples(registry, 4)
    failures = {k[1]: v for k, v in got.items() if k[0] == "kimik3_proxy_tool_call_parse_failures_total"}
    by_kind = {dict(labels)["kind"]: value for labels, value in failures.items()}
    assert by_kind == {"arguments": 2.0, "parser": 1.0}
    assert (
        got[
            (
                "kimik3_proxy_errors_total",
                (("kind", "http_5xx"), ("model", "kimi-k3"), ("route", "/v1/chat/completions")),
            )
        ]
        == 1
    )


def test_a_wrong_key_and_health_pass_unchanged(proxied):
    upstream, base, registry = proxied
    with pytest.raises(openai.AuthenticationError) as refused:
        client(base, key="wrong").chat.completions.create(model="kimi-k3", messages=[{"role": "user", "content": "x"}])
    assert "Invalid API Key" in str(refused.value)
    health = httpx.get(f"{base}/health")
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    got = samples(registry, 2)
    assert (
        got[
            (
                "kimik3_proxy_errors_total",
                (("kind", "http_4xx"), ("model", "kimi-k3"), ("route", "/v1/chat/completions")),
            )
        ]
        == 1
    )
    assert got[("kimik3_proxy_requests_total", (("code", "200"), ("model", "default"), ("route", "/health")))] == 1


def test_an_upstream_that_does_not_answer_is_a_502_and_an_error(proxied):
    upstream, base, registry = proxied
    upstream.__exit__()  # llama-server gone (crashed, restarting)
    reply = httpx.post(f"{base}/v1/chat/completions", json={"model": "m", "messages": []})
    assert reply.status_code == 502
    got = samples(registry, 1)
    assert (
        got[("kimik3_proxy_errors_total", (("kind", "upstream"), ("model", "m"), ("route", "/v1/chat/completions")))]
        == 1
    )
