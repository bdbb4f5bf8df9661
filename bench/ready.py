"""Benchmark: readiness latency and the cost of a no-op apply, on the demo profile (real dockerd).

    .venv/bin/python bench/ready.py [--runs 3] [--profile FILE]     # after `bash scripts/demo.sh`

1. Ready latency: remove the profile's container, `kimik3 apply`, and compare the time of
   llama-server's "listening on" log line (docker's own timestamps) with kimik3's "healthy" event.
   Goal: <= 0.5 s.
2. No-op apply overhead: `kimik3 apply` on the converged host vs a baseline in the same run: the
   interpreter start with `kimik3_reconciler.cli` imported, plus the reads a plan makes, made the way
   kimik3 makes them on this path (Engine API over the unix socket with the standard library, as
   adapters/docker_socket.py; GET /health with http.client; a stat of each cached shard). Prints the ratio.

--profile: a renamed copy of the demo profile (its own name and port) on a daemon other people use;
this script removes and relaunches that profile's container.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml
from common import ENV, KIMIK3, PROFILE, ROOT, timed

sys.path.insert(0, str(ROOT))
from kimik3_reconciler.adapters.docker_socket import DEFAULT_SOCKET, EngineSocket  # noqa: E402
from kimik3_reconciler.model.labels import CONTAINER_FINGERPRINT, IMAGE_FINGERPRINT  # noqa: E402

IMPORTS = "import kimik3_reconciler.cli"  # what a no-op apply imports before it observes (bench/plan.py's import-only)


def _ts(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")[:26] + "+00:00")


def ready_latency(profile: Path, name: str) -> float:
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    apply = subprocess.run([*KIMIK3, "apply", str(profile)], capture_output=True, text=True, env=ENV, check=True)
    healthy = next(json.loads(ln) for ln in apply.stderr.splitlines() if '"healthy"' in ln)
    logs = subprocess.run(["docker", "logs", "-t", name], capture_output=True, text=True, check=True).stderr
    listening = next(ln for ln in logs.splitlines() if "listening on" in ln)
    return (_ts(healthy["timestamp"]) - _ts(listening.split()[0])).total_seconds()


def raw_observation(name: str, port: int, cache: Path) -> float:
    """The reads a no-op plan makes, and nothing else: daemon info, the container, the image, kimik3's images
    and containers by label, /health, a stat of each cached file."""
    start = time.perf_counter()
    engine = EngineSocket(DEFAULT_SOCKET)
    engine.info()
    container = engine.inspect_container(name)
    engine.inspect_image(container["Image"])
    engine.images(filters={"label": IMAGE_FINGERPRINT})
    engine.containers(all=True, filters={"label": CONTAINER_FINGERPRINT})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=3)
    connection.request("GET", "/health")
    connection.getresponse().read()
    connection.close()
    for f in cache.rglob("*.gguf"):
        f.stat()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", type=Path, default=PROFILE)
    args = parser.parse_args()
    runs, profile = args.runs, args.profile.resolve()
    data = yaml.safe_load(profile.read_text())
    name, port = data["name"], data["serve"]["port"]
    cache = (profile.parent / data["model"]["cache_dir"]).resolve()
    latencies = [ready_latency(profile, name) for _ in range(runs)]
    print(
        f"ready latency (listening -> kimik3 healthy): median {statistics.median(latencies):.3f} s "
        f"(runs: {', '.join(f'{x:.3f}' for x in latencies)}; goal <= 0.5 s)"
    )
    noop = [timed([*KIMIK3, "apply", str(profile)]) for _ in range(runs)]
    start_import = [timed([sys.executable, "-c", IMPORTS]) for _ in range(runs)]
    raw = [raw_observation(name, port, cache) for _ in range(runs)]
    baseline = statistics.median(start_import) + statistics.median(raw)
    print(
        f"no-op apply: median {statistics.median(noop):.3f} s; baseline (interpreter+imports "
        f"{statistics.median(start_import):.3f} s + raw observation calls {statistics.median(raw):.3f} s) = "
        f"{baseline:.3f} s; ratio {statistics.median(noop) / baseline:.2f}x"
    )


if __name__ == "__main__":
    main()
