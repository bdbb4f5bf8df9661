"""Benchmark: the cost of the latency proxy (metrics.proxy), on the demo's real llama-server, in one run.

    .venv/bin/python bench/proxy.py [--rounds 3] [--requests 6] [--tokens 64] [--name k3mx-bench] [--port 19220]

Deploys the demo profile (as `--name`, ports `--port`..+2, its own state dir under .kimik3-demo/)
with `metrics: {proxy: true}`: the proxy on `--port` (19220), llama-server on 127.0.0.1:`--port`+1. Then, alternating
direct and proxied runs in each round (drift on a shared machine hits both alike):
  - aggregate tok/s at concurrency 8: 8 clients streaming `--requests` completions each, `--tokens` tokens
    with ignore_eos; tokens = streamed events;
  - TTFT at concurrency 1 (the added latency alone, no queueing in front of the server's slots), interleaved
    request by request (direct, proxy, direct, ...: the machine's drift hits both of a pair alike); the added
    TTFT of a round is the median of the paired differences.
Prints each round and the medians: tok/s ratio (proxy / direct, goal >= 0.98) and added TTFT p50 (goal <= 5 ms),
and the proxy process's CPU time per streamed token (utime+stime from /proc: its own cost, which the
machine's noise does not move).
Removes the deployment after (`kimik3 destroy`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kimik3_demo.hub import FixtureHub  # noqa: E402
from kimik3_demo.prepare import demo_repos, ensure_source_archive, prepare_hub_root  # noqa: E402

DEMO = ROOT / ".kimik3-demo"
KIMIK3 = [sys.executable, "-m", "kimik3_reconciler"]


async def one(client: httpx.AsyncClient, url: str, tokens: int) -> tuple[float, int]:
    """(TTFT, streamed events) of one streamed completion."""
    body = {"messages": [{"role": "user", "content": "count"}], "max_tokens": tokens, "stream": True,
            "ignore_eos": True}
    start, first, events = time.perf_counter(), None, 0
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as reply:
        if reply.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {reply.status_code} {(await reply.aread()).decode()[:200]}")
        async for line in reply.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                first = first or time.perf_counter()
                events += 1
    return (first or time.perf_counter()) - start, events


async def load(url: str, concurrency: int, requests: int, tokens: int) -> tuple[float, list[float]]:
    """(aggregate events/s, TTFTs) of `concurrency` clients each streaming `requests` completions."""
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
        await one(client, url, 4)  # warm the connection and the server
        start = time.perf_counter()
        await asyncio.gather(*(client_loop(client) for _ in range(concurrency)))
        wall = time.perf_counter() - start
    return total / wall, ttfts


async def paired_ttft(direct: str, proxied: str, pairs: int) -> tuple[list[float], list[float]]:
    """TTFTs of `pairs` requests to each, alternating which goes first; one client, no keep-alive (as `load`)."""
    firsts: dict[str, list[float]] = {direct: [], proxied: []}
    async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_keepalive_connections=0)) as client:
        for url in (direct, proxied):
            await one(client, url, 4)  # warm both
        for i in range(pairs):
            for url in ((direct, proxied) if i % 2 else (proxied, direct)):
                firsts[url].append((await one(client, url, 4))[0])
    return firsts[direct], firsts[proxied]


def kimik3(work: Path, *args: str) -> None:
    env = {**os.environ, "KIMIK3_STATE_DIR": str(work / "state"), "HF_HOME": str(work / "hf-home"),
           "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    done = subprocess.run([*KIMIK3, *args], cwd=work, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"kimik3 {' '.join(args)} exited {done.returncode}:\n{done.stderr[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=6, help="completions per client at c8")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--name", default="k3mx-bench", help="profile name (container k3mx-bench-…)")
    parser.add_argument("--pairs", type=int, default=40, help="interleaved direct/proxy TTFT pairs per round")
    parser.add_argument("--keep", action="store_true", help="deploy, print the URLs and leave it running")
    parser.add_argument("--port", type=int, default=19220, help="the proxy's port; llama-server +1, exporter +2")
    args = parser.parse_args()
    prepare_hub_root(DEMO / "hub")
    archive = DEMO / "llama.cpp-b11434.tar.gz"
    ensure_source_archive(DEMO / "cache", archive)
    work = Path(tempfile.mkdtemp(prefix="kimik3-bench-proxy-", dir=DEMO))
    with FixtureHub(demo_repos(DEMO / "hub")) as hub:
        profile = yaml.safe_load((ROOT / "profiles" / "demo-cpu.yaml").read_text())
        profile["name"] = args.name
        profile["model"].update(endpoint=hub.url, cache_dir=str(work / "hf-cache"))
        profile["build"]["archive"] = str(archive)
        profile["serve"]["port"] = args.port
        profile["metrics"] = {"port": args.port + 2, "proxy": True, "server_port": args.port + 1}
        (work / "profile.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
        kimik3(work, "apply", "profile.yaml", "--no-verify-server")
        exporter = json.loads((work / "state" / "metrics" / args.name / "process.json").read_text())
        if args.keep:  # for profiling by hand; `kimik3 destroy` with KIMIK3_STATE_DIR=<work>/state removes it
            print(json.dumps({"work": str(work), "direct": f"http://127.0.0.1:{args.port + 1}",
                              "proxy": f"http://127.0.0.1:{args.port}", "exporter_pid": exporter["pid"]}))
            return
        try:
            run(args, exporter["pid"])
        finally:
            kimik3(work, "destroy", "profile.yaml")
            shutil.rmtree(work, ignore_errors=True)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (/proc/<pid>/stat), in seconds: the proxy's own cost, whatever the machine's noise."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(args: argparse.Namespace, exporter_pid: int) -> None:
    direct, proxied = f"http://127.0.0.1:{args.port + 1}", f"http://127.0.0.1:{args.port}"
    rows = []
    tokens_through, cpu_spent = 0.0, 0.0
    for round_no in range(1, args.rounds + 1):
        row = {}
        # Alternate which goes first: a machine shared with other work drifts within a round.
        order = (("direct", direct), ("proxy", proxied)) if round_no % 2 else (("proxy", proxied), ("direct", direct))
        for label, url in order:
            cpu = cpu_seconds(exporter_pid)
            started = time.perf_counter()
            rate, _ = asyncio.run(load(url, 8, args.requests, args.tokens))
            if label == "proxy":
                tokens_through += rate * (time.perf_counter() - started)
                cpu_spent += cpu_seconds(exporter_pid) - cpu
            row[label] = rate
        ttft_direct, ttft_proxy = asyncio.run(paired_ttft(direct, proxied, args.pairs))
        row["added"] = statistics.median(p - d for d, p in zip(ttft_direct, ttft_proxy)) * 1000
        rows.append(row)
        print(f"round {round_no}: c8 tok/s direct {row['direct']:.1f} proxy {row['proxy']:.1f} "
              f"(ratio {row['proxy'] / row['direct']:.3f}); TTFT p50 c1 direct "
              f"{statistics.median(ttft_direct) * 1000:.2f} ms proxy {statistics.median(ttft_proxy) * 1000:.2f} ms, "
              f"added (median of {args.pairs} pairs) {row['added']:+.2f} ms")
    ratio = statistics.median(r["proxy"] / r["direct"] for r in rows)
    added = statistics.median(r["added"] for r in rows)
    print(json.dumps({"rounds": args.rounds, "tok_s_ratio_c8": round(ratio, 3), "ttft_p50_added_ms_c1": round(added, 2),
                      "proxy_cpu_us_per_token": round(cpu_spent / max(tokens_through, 1) * 1e6, 1),
                      "goal": {"tok_s_ratio_c8": ">= 0.98", "ttft_p50_added_ms": "<= 5"}}))


if __name__ == "__main__":
    main()
