"""The latency proxy's cost, measured against the direct port: the one measuring core of bench/proxy.py (the demo
deployed in Docker) and tools/gpu_proof/proxy_native.py (kimik3's argv run natively on the lent H200).

Given a server's direct URL, the proxy's URL in front of it and the proxy process's pid, `measure` runs rounds,
alternating direct and proxied runs in each (drift on a shared machine hits both alike):
  - aggregate tok/s at concurrency 8: 8 clients streaming `requests` completions each, `tokens` tokens with
    ignore_eos; tokens = streamed events;
  - TTFT at concurrency 1 (the added latency alone, no queueing in front of the server's slots), interleaved
    request by request (direct, proxy, direct, ...: the machine's drift hits both of a pair alike); the added
    TTFT of a round is the median of the paired differences (skipped with pairs=0);
and the proxy process's CPU time per streamed token (utime+stime from /proc: its own cost, which the machine's
noise does not move). `summarize` turns the rounds into the medians the goal is stated in.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

GOAL = {"tok_s_ratio_c8": ">= 0.98", "ttft_p50_added_ms": "<= 5"}


async def one(client: httpx.AsyncClient, url: str, tokens: int) -> tuple[float, int]:
    """(TTFT, streamed events) of one streamed completion."""
    body = {
        "messages": [{"role": "user", "content": "count"}],
        "max_tokens": tokens,
        "stream": True,
        "ignore_eos": True,
    }
    start, first, events = time.perf_counter(), None, 0
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as reply:
        if reply.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {reply.status_code} {(await reply.aread()).decode()[:200]}")
        async for line in reply.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                first = first or time.perf_counter()
                events += 1
    return (first or time.perf_counter()) - start, events


async def load(url: str, concurrency: int, requests: int, tokens: int) -> tuple[float, int, list[float]]:
    """(aggregate events/s, events streamed in all, the warm-up's included, TTFTs) of `concurrency` clients each
    streaming `requests` completions."""
    ttfts: list[float] = []
    total = 0

    async def client_loop(client: httpx.AsyncClient) -> None:
        nonlocal total
        for _ in range(requests):
            ttft, events = await one(client, url, tokens)
            ttfts.append(ttft)
            total += events

    # No keep-alive on the client side, direct or proxied alike: llama-server (cpp-httplib) closes a connection
    # after a few requests, and a client that reuses it in that instant fails (the proxy retries that case).
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:
        warm = (await one(client, url, 4))[1]  # warm the connection and the server
        start = time.perf_counter()
        await asyncio.gather(*(client_loop(client) for _ in range(concurrency)))
        wall = time.perf_counter() - start
    return total / wall, total + warm, ttfts


async def paired_ttft(direct: str, proxied: str, pairs: int) -> tuple[list[float], list[float]]:
    """TTFTs of `pairs` requests to each, alternating which goes first; one client, no keep-alive (as `load`)."""
    firsts: dict[str, list[float]] = {direct: [], proxied: []}
    async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_keepalive_connections=0)) as client:
        for url in (direct, proxied):
            await one(client, url, 4)  # warm both
        for i in range(pairs):
            for url in (direct, proxied) if i % 2 else (proxied, direct):
                firsts[url].append((await one(client, url, 4))[0])
    return firsts[direct], firsts[proxied]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (/proc/<pid>/stat), in seconds: the proxy's own cost, whatever the machine's noise."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_round(
    direct: str, proxied: str, proxy_pid: int, round_no: int, requests: int, tokens: int, pairs: int
) -> dict[str, Any]:
    """One round: c8 direct and proxied (which goes first alternates with the round), then `pairs` TTFT pairs.
    The row keeps what its ratios are computed from: tok/s of each side, the proxied tokens and the proxy's
    CPU seconds over them, the TTFT medians and the added TTFT (median of paired differences)."""
    row: dict[str, Any] = {"round": round_no}
    order = (("direct", direct), ("proxy", proxied)) if round_no % 2 else (("proxy", proxied), ("direct", direct))
    for label, url in order:
        cpu = cpu_seconds(proxy_pid)
        rate, events, _ = asyncio.run(load(url, 8, requests, tokens))
        row[f"c8_tok_s_{label}"] = round(rate, 2)
        if label == "proxy":
            row["proxy_tokens"] = events  # the warm-up's included: the CPU measured covers it too
            row["proxy_cpu_s"] = round(cpu_seconds(proxy_pid) - cpu, 4)
    row["tok_s_ratio_c8"] = round(row["c8_tok_s_proxy"] / row["c8_tok_s_direct"], 4)
    if pairs:
        ttft_direct, ttft_proxy = asyncio.run(paired_ttft(direct, proxied, pairs))
        row["ttft_p50_ms_direct"] = round(statistics.median(ttft_direct) * 1000, 3)
        row["ttft_p50_ms_proxy"] = round(statistics.median(ttft_proxy) * 1000, 3)
        row["ttft_added_ms"] = round(statistics.median(p - d for d, p in zip(ttft_direct, ttft_proxy)) * 1000, 3)
    return row


def describe(row: dict[str, Any]) -> str:
    text = (
        f"round {row['round']}: c8 tok/s direct {row['c8_tok_s_direct']:.1f} proxy {row['c8_tok_s_proxy']:.1f} "
        f"(ratio {row['tok_s_ratio_c8']:.3f}); proxy CPU {row['proxy_cpu_s'] / row['proxy_tokens'] * 1e6:.0f} "
        f"us/token"
    )
    if "ttft_added_ms" in row:
        text += (
            f"; TTFT p50 c1 direct {row['ttft_p50_ms_direct']:.2f} ms proxy {row['ttft_p50_ms_proxy']:.2f} ms, "
            f"added (median of pairs) {row['ttft_added_ms']:+.2f} ms"
        )
    return text


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The medians over rounds (ratio of each round, then the median), and CPU per token over all proxied tokens."""
    summary: dict[str, Any] = {
        "rounds": len(rows),
        "tok_s_ratio_c8": round(statistics.median(r["tok_s_ratio_c8"] for r in rows), 3),
        "tok_s_ratio_c8_range": [min(r["tok_s_ratio_c8"] for r in rows), max(r["tok_s_ratio_c8"] for r in rows)],
        "c8_tok_s_direct": round(statistics.median(r["c8_tok_s_direct"] for r in rows), 1),
        "proxy_cpu_us_per_token": round(
            sum(r["proxy_cpu_s"] for r in rows) / max(sum(r["proxy_tokens"] for r in rows), 1) * 1e6, 1
        ),
    }
    if all("ttft_added_ms" in r for r in rows):
        summary["ttft_p50_added_ms_c1"] = round(statistics.median(r["ttft_added_ms"] for r in rows), 2)
    return summary


def measure(
    direct: str,
    proxied: str,
    proxy_pid: int,
    rounds: int,
    requests: int,
    tokens: int,
    pairs: int,
    report: Callable[[str], None] = print,
    deadline: float | None = None,
) -> dict[str, Any]:
    """`rounds` rounds (fewer if time.monotonic() passes `deadline` first, at least one), printed as they end;
    returns {"rows": [...], **summarize(rows)}."""
    rows: list[dict[str, Any]] = []
    for round_no in range(1, rounds + 1):
        rows.append(measure_round(direct, proxied, proxy_pid, round_no, requests, tokens, pairs))
        report(describe(rows[-1]))
        if deadline is not None and time.monotonic() > deadline and round_no < rounds:
            report(f"deadline: stopped after {round_no} of {rounds} rounds")
            break
    return {"rows": rows, **summarize(rows)}
