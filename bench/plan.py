"""Benchmark: a no-op `kimik3 plan` on a converged host vs the raw cost of its observation calls.

    .venv/bin/python bench/plan.py [--runs 5]        # after `bash scripts/demo.sh`

Baseline, in the same run: the interpreter start with kimik3's modules imported, plus the calls
the collectors make done directly (docker inspect/list/info, GET /health, NVML, /proc reads,
cache stat). Prints both and the ratio: the planner's own overhead on top of what it must ask.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from common import IMPORTS, KIMIK3, PROFILE, ROOT, timed




def raw_calls() -> float:
    import docker
    import httpx

    sys.path.insert(0, str(ROOT))
    from kimik3_reconciler.adapters.nvml import nvml_dump

    start = time.perf_counter()
    client = docker.from_env()
    client.api.inspect_container("kimi-k3-demo")
    client.images.list(filters={"label": "kimik3.image.fingerprint"})
    client.api.containers(all=True, filters={"label": "kimik3.container.fingerprint"})
    client.info()
    httpx.get("http://127.0.0.1:18181/health", timeout=3)
    nvml_dump()
    for name in ("/proc/meminfo", "/proc/cpuinfo", "/proc/sys/kernel/numa_balancing"):
        Path(name).read_text()
    for f in (ROOT / ".kimik3-demo" / "hf-cache").rglob("*.gguf"):
        f.stat()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    plan = [timed([*KIMIK3, "plan", str(PROFILE)]) for _ in range(runs)]
    imports = [timed([sys.executable, "-c", IMPORTS + ", pynvml"]) for _ in range(runs)]
    raw = [raw_calls() for _ in range(runs)]
    baseline = statistics.median(imports) + statistics.median(raw)
    print(f"no-op plan: median {statistics.median(plan):.3f} s; baseline {baseline:.3f} s (imports "
          f"{statistics.median(imports):.3f} s + raw observation calls {statistics.median(raw):.3f} s); "
          f"ratio {statistics.median(plan) / baseline:.2f}x")


if __name__ == "__main__":
    main()
