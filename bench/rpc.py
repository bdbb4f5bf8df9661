"""Benchmark: the demo model served with an RPC worker vs without, and the worker's tensor cache warm vs cold.

    .venv/bin/python bench/rpc.py [--runs 3]     # real dockerd, the demo's CPU image, openssh-server installed

Everything as the integration test sets it up (tests/integration/test_rpc_docker.py): a throwaway sshd
on 127.0.0.1 reaches the worker's Docker over ssh://, the worker's rpc-server binds 127.0.0.2, the
main server keeps the first two layers' experts (serve.n_cpu_moe 2) and puts the rest on RPC0. One run measures:

1. generation tok/s (llama-server's own `timings.predicted_per_second`, 64 tokens, temperature 0) and
   load time (container start → "listening on", docker's timestamps), single-host vs with the worker;
2. load time with the worker's tensor cache (rpc-server -c) warm vs cold: cold = the worker and its
   cache volume removed first, warm = the worker relaunched on its kept cache.

Printed as ratios of the same run. On this CPU-only dev machine both "hosts" share two cores and the
"network" is loopback, so the ratios say what RPC costs in serialization and round trips, not what a
10/25/100 GbE link costs (docs/operations.md). The demo's tensors are far below rpc-server's 10 MiB
hash threshold (ggml-rpc.cpp HASH_THRESHOLD): the cache is never consulted for them, so warm/cold is
expected to be ~1.0 here; it matters for real quants (hundreds of MiB per expert tensor).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from support.realparts import demo_hub, demo_profile, kimik3, write_profile  # noqa: E402
from support.sshd import running_sshd  # noqa: E402

SSH_PORT, WORKER_PORT, MAIN_PORT, SOLO_PORT = 19320, 19321, 19322, 19323
MAIN, SOLO = "k3rpc-bench", "k3rpc-bench-solo"
WORKER = f"{MAIN}-rpc-w1"
VOLUME = f"kimik3-rpc-cache-{MAIN}-w1"
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time"]


def _ts(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "")[:26])


def load_seconds(name: str) -> float:
    """Container start to llama-server's "listening on" line, from docker's own timestamps."""
    started = subprocess.run(
        ["docker", "inspect", "-f", "{{.State.StartedAt}}", name], capture_output=True, text=True, check=True
    ).stdout.strip()
    logs = subprocess.run(["docker", "logs", "-t", name], capture_output=True, text=True)
    line = next(ln for ln in (logs.stdout + logs.stderr).splitlines() if "listening on" in ln)
    return (_ts(line.split()[0]) - _ts(started)).total_seconds()


def tokens_per_second(port: int) -> float:
    rates = []
    for prompt in PROMPTS:
        body = json.dumps({"prompt": prompt, "n_predict": 64, "temperature": 0, "cache_prompt": False}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/completion", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=300) as answer:
            rates.append(json.loads(answer.read())["timings"]["predicted_per_second"])
    return statistics.mean(rates)


def relaunch(work: Path, profile: str, *remove: str, volume: bool = False) -> None:
    subprocess.run(["docker", "rm", "-f", *remove], capture_output=True)
    if volume:
        subprocess.run(["docker", "volume", "rm", "-f", VOLUME], capture_output=True)
    kimik3(work, "apply", "--no-verify-server", profile)  # the load is what is measured, not verify


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="k3rpc-bench-"))
    rows: dict[str, list[float]] = {k: [] for k in ("solo_tps", "rpc_tps", "solo_load", "rpc_load", "cold", "warm")}
    with running_sshd(work / "sshd", SSH_PORT) as sshd, demo_hub() as hub:
        os.environ["PATH"] = sshd.env()["PATH"]
        solo = demo_profile(work, SOLO, SOLO_PORT, hub.url)
        solo["serve"]["n_cpu_moe"] = 2
        split = demo_profile(work, MAIN, MAIN_PORT, hub.url)
        split["serve"]["n_cpu_moe"] = 2
        split["rpc"] = {
            "workers": [{"name": "w1", "docker": sshd.docker_url, "bind": "127.0.0.2", "port": WORKER_PORT}]
        }
        write_profile(work, solo, "solo.yaml")
        write_profile(work, split, "rpc.yaml")
        try:
            for _ in range(args.runs):
                relaunch(work, "solo.yaml", SOLO)
                relaunch(work, "rpc.yaml", MAIN, WORKER, volume=True)  # cold: no cached tensors
                rows["solo_load"].append(load_seconds(SOLO))
                rows["rpc_load"].append(load_seconds(MAIN))
                rows["cold"].append(load_seconds(MAIN))
                rows["solo_tps"].append(tokens_per_second(SOLO_PORT))
                rows["rpc_tps"].append(tokens_per_second(MAIN_PORT))
                relaunch(work, "rpc.yaml", MAIN, WORKER)  # warm: the worker's cache volume is kept
                rows["warm"].append(load_seconds(MAIN))
        finally:
            subprocess.run(["docker", "rm", "-f", MAIN, WORKER, SOLO], capture_output=True)
            subprocess.run(["docker", "volume", "rm", "-f", VOLUME], capture_output=True)
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"runs: {args.runs} (medians)")
    print("| measure | single host | with worker | ratio (worker / single) |")
    print("|---|---|---|---|")
    print(
        f"| generation tok/s | {med['solo_tps']:.1f} | {med['rpc_tps']:.1f} | {med['rpc_tps'] / med['solo_tps']:.2f} |"
    )
    print(f"| load s | {med['solo_load']:.2f} | {med['rpc_load']:.2f} | {med['rpc_load'] / med['solo_load']:.2f} |")
    print("| measure | cache cold | cache warm | ratio (warm / cold) |")
    print("|---|---|---|---|")
    print(f"| load s (with worker) | {med['cold']:.2f} | {med['warm']:.2f} | {med['warm'] / med['cold']:.2f} |")


if __name__ == "__main__":
    main()
