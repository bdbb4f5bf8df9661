"""Benchmark: what kimik3's router (router.policy: slots, adapters/slot_router.py) costs a request, in one run.

    .venv/bin/python bench/router_cost.py [--rounds 3] [--requests 4] [--tokens 32] [--pairs 10]

One llama-server replica on loopback (tests/support/llama_replicas.py: the demo's image, the tiny GGUF, 8 slots),
smg behind kimik3's router as `fleet apply` starts them (bench/fleet_cache.py's `routed`, policy slots), then
bench/proxy_measure.py's measurement, the exporter proxy's: alternating direct and routed runs in each round,
aggregate tok/s at concurrency 8 (ratio routed / direct), TTFT added at concurrency 1 (median of paired differences),
and the router process's CPU time per streamed token. Removes the replica after.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from fleet_cache import SLOTS, routed  # noqa: E402
from support.llama_replicas import Replicas, write_model  # noqa: E402

from bench.proxy_measure import measure  # noqa: E402


def router_pid(port: int) -> int:
    """The pid of `kimik3 fleet route` listening on `port` (the process routed() started)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"route" in argv and str(port).encode() in argv:
            return int(proc.name)
    raise SystemExit(f"no kimik3 router process on port {port}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=4, help="completions per client at concurrency 8")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--pairs", type=int, default=10, help="TTFT pairs at concurrency 1 per round")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="k3-router-cost-") as tmp:
        work = Path(tmp)
        model = write_model(work)
        with Replicas(model, count=1, prefix="k3rcost", parallel=8) as replicas:
            with routed(replicas.urls, SLOTS, work) as (url, _smg):
                pid = router_pid(int(url.rsplit(":", 1)[1]))
                result = measure(replicas.urls[0], url, pid, args.rounds, args.requests, args.tokens, args.pairs)
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
