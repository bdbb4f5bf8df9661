"""Benchmark: the latency proxy's own CPU time per streamed token, against a scripted upstream (no model).

    .venv/bin/python bench/proxy_cpu.py [--streams 8] [--requests 6] [--tokens 256] [--rate 100] [--profile FILE]

A figure the machine's noise does not move: the proxy (adapters/latency_proxy.py with exporter/proxy_observe.py's
series, on the event loop `metrics-serve` runs it on) in its own process between an upstream that streams llama-server's own SSE
events (one chunked write per token, `--rate` tokens/s per stream, the last event with timings, then [DONE]) and
`--streams` clients; the proxy's utime+stime (/proc) over the streamed events. `--profile FILE` runs the proxy
under cProfile and writes its stats to FILE. Ports 18770-18771.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.proxy_measure import cpu_seconds, load  # noqa: E402

UPSTREAM_PORT, PROXY_PORT = 18770, 18771
_ID = "chatcmpl-pFNmSY22FbfdB1ROKV6CUG6efyaUhPtw"
_TAIL = (
    f'"created":1796292687,"id":"{_ID}","model":"Kimi-K3-UD-Q2_K_XL-00001-of-00012.gguf",'
    '"system_fingerprint":"b11434-ad1de39","object":"chat.completion.chunk"}'
)


def event(delta: str, finish: str = "null") -> bytes:
    """One SSE event as llama-server b11434 writes it (its shape and size)."""
    return (f'data: {{"choices":[{{"finish_reason":{finish},"index":0,"delta":{delta}}}],' + _TAIL + "\n\n").encode()


def upstream(rate: float) -> None:
    from aiohttp import web

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        reply = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        reply.enable_chunked_encoding()
        await reply.prepare(request)
        await reply.write(event('{"role":"assistant","content":null}'))
        for i in range(int(body.get("max_tokens", 16))):
            await asyncio.sleep(1 / rate)
            await reply.write(event(json.dumps({"content": f" {i}"})))
        await reply.write(event("{}", '"length"')[:-3] + b',"timings":{"predicted_n":1}}\n\n')
        await reply.write(b"data: [DONE]\n\n")
        await reply.write_eof()
        return reply

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=UPSTREAM_PORT, print=None, access_log=None)


def proxy(profile: str | None, stock_loop: bool) -> None:
    from prometheus_client.registry import CollectorRegistry

    from kimik3_reconciler.adapters import metrics_http
    from kimik3_reconciler.adapters.latency_proxy import proxy_app
    from kimik3_reconciler.exporter.proxy_observe import ProxyMetrics

    labels = {
        "profile": "k3px17-cpu",
        "quant": "UD-Q2_K_XL",
        "build": "mainline-ad1de39-b11434-cpu",
        "fingerprint": "0123456789abcdef",
    }
    app = proxy_app(f"http://127.0.0.1:{UPSTREAM_PORT}", ProxyMetrics(CollectorRegistry(), labels))
    sites = [(app, "127.0.0.1", PROXY_PORT)]

    def serve() -> None:
        if stock_loop:  # asyncio's own event loop, for comparison
            asyncio.run(metrics_http._serve(sites))
        else:
            metrics_http.serve(sites)  # as `metrics-serve` runs it

    if not profile:
        serve()
        return
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        serve()
    finally:
        profiler.disable()
        profiler.dump_stats(profile)


def wait(url: str) -> None:
    for _ in range(200):
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{url} did not answer")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--role", choices=("client", "upstream", "proxy"), default="client")
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--requests", type=int, default=6, help="completions per stream")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--rate", type=float, default=100.0, help="tokens/s per stream from the upstream")
    parser.add_argument("--profile", help="cProfile the proxy into this file")
    parser.add_argument(
        "--asyncio",
        action="store_true",
        help="run the proxy on asyncio's own event loop (`metrics-serve` runs it on uvloop's)",
    )
    args = parser.parse_args()
    if args.role == "upstream":
        return upstream(args.rate)
    if args.role == "proxy":
        return proxy(args.profile, args.asyncio)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    me = [sys.executable, __file__, "--rate", str(args.rate)]
    children = [subprocess.Popen([*me, "--role", "upstream"], env=env)]
    children.append(
        subprocess.Popen(
            [
                *me,
                "--role",
                "proxy",
                *(["--profile", args.profile] if args.profile else []),
                *(["--asyncio"] if args.asyncio else []),
            ],
            env=env,
        )
    )
    try:
        wait(f"http://127.0.0.1:{UPSTREAM_PORT}/health")
        wait(f"http://127.0.0.1:{PROXY_PORT}/health")
        pid = children[1].pid
        cpu = cpu_seconds(pid)
        rate, events, _ = asyncio.run(load(f"http://127.0.0.1:{PROXY_PORT}", args.streams, args.requests, args.tokens))
        spent = cpu_seconds(pid) - cpu
        print(
            json.dumps(
                {
                    "streams": args.streams,
                    "events": events,
                    "tok_s": round(rate, 1),
                    "proxy_cpu_s": round(spent, 3),
                    "proxy_cpu_us_per_token": round(spent / events * 1e6, 1),
                }
            )
        )
    finally:
        for child in reversed(children):
            child.send_signal(2)
            child.wait(timeout=20)


if __name__ == "__main__":
    main()
