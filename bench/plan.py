"""Benchmark: a no-op `kimik3 plan` on a converged host vs two baselines measured in the same run.

    .venv/bin/python bench/plan.py [--runs 5]        # after `bash scripts/demo.sh`

1. The floor a user compares with (issue 13, goal <= 3x): `python -c pass` + `docker ps` +
   `docker inspect` of the container, as commands.
2. What kimik3 must do anyway: the interpreter with kimik3's modules imported, plus the calls the
   collectors make, done directly (docker inspect/list/info, GET /health, NVML, /proc reads, cache
   stat). The ratio is the planner's own overhead on top of what it must ask.
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
    floor = [timed([sys.executable, "-c", "pass"]) + timed(["docker", "ps"]) + timed(["docker", "inspect", "kimi-k3-demo"])
             for _ in range(runs)]
    imports = [timed([sys.executable, "-c", IMPORTS + ", pynvml"]) for _ in range(runs)]
    raw = [raw_calls() for _ in range(runs)]
    baseline = statistics.median(imports) + statistics.median(raw)
    median = statistics.median(plan)
    print(f"no-op plan: median {median:.3f} s")
    print(f"  vs python -c pass + docker ps + docker inspect: {statistics.median(floor):.3f} s; "
          f"ratio {median / statistics.median(floor):.2f}x (goal <= 3x)")
    print(f"  vs kimik3's imports {statistics.median(imports):.3f} s + its raw observation calls "
          f"{statistics.median(raw):.3f} s = {baseline:.3f} s; ratio {median / baseline:.2f}x")


if __name__ == "__main__":
    main()
