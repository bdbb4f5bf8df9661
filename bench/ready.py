"""Benchmark: readiness latency and the cost of a no-op apply, on the demo profile (real dockerd).

    .venv/bin/python bench/ready.py [--runs 3]        # after `bash scripts/demo.sh`

1. Ready latency: remove the demo container, `kimik3 apply`, and compare the time of
   llama-server's "listening on" log line (docker's own timestamps) with kimik3's "healthy" event.
   Goal: <= 0.5 s.
2. No-op apply overhead: `kimik3 apply` on the converged host vs a baseline in the same run, the
   raw observation calls alone (docker inspect + image list + GET /health + cache stat) plus the
   interpreter start with kimik3 imported. Prints the ratio.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import time

from common import ENV, IMPORTS, KIMIK3, PROFILE, ROOT, timed

NAME = "kimi-k3-demo"


def _ts(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")[:26] + "+00:00")


def ready_latency() -> float:
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)
    apply = subprocess.run([*KIMIK3, "apply", str(PROFILE)], capture_output=True, text=True, env=ENV, check=True)
    healthy = next(json.loads(ln) for ln in apply.stderr.splitlines() if '"healthy"' in ln)
    logs = subprocess.run(["docker", "logs", "-t", NAME], capture_output=True, text=True).stderr
    listening = next(ln for ln in logs.splitlines() if "listening on" in ln)
    return (_ts(healthy["timestamp"]) - _ts(listening.split()[0])).total_seconds()



def raw_observation() -> float:
    import docker
    import httpx

    start = time.perf_counter()
    client = docker.from_env()
    client.api.inspect_container(NAME)
    client.images.list(filters={"label": "kimik3.image.fingerprint"})
    httpx.get("http://127.0.0.1:18181/health", timeout=3)
    for f in (ROOT / ".kimik3-demo" / "hf-cache").rglob("*.gguf"):
        f.stat()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    latencies = [ready_latency() for _ in range(runs)]
    print(f"ready latency (listening -> kimik3 healthy): median {statistics.median(latencies):.3f} s "
          f"(runs: {', '.join(f'{x:.3f}' for x in latencies)}; goal <= 0.5 s)")
    noop = [timed([*KIMIK3, "apply", str(PROFILE)]) for _ in range(runs)]
    start_import = [timed([sys.executable, "-c", IMPORTS]) for _ in range(runs)]
    raw = [raw_observation() for _ in range(runs)]
    baseline = statistics.median(start_import) + statistics.median(raw)
    print(f"no-op apply: median {statistics.median(noop):.3f} s; baseline (interpreter+imports "
          f"{statistics.median(start_import):.3f} s + raw observation calls {statistics.median(raw):.3f} s) = "
          f"{baseline:.3f} s; ratio {statistics.median(noop) / baseline:.2f}x")


if __name__ == "__main__":
    main()
