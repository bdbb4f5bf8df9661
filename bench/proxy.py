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
The measuring is bench/proxy_measure.py's (shared with tools/gpu_proof/proxy_native.py, the same measurement of
kimik3's argv run natively on the lent H200). Prints each round and the medians: tok/s ratio (proxy / direct, goal >= 0.98) and added TTFT p50 (goal <= 5 ms),
and the proxy process's CPU time per streamed token (utime+stime from /proc: its own cost, which the
machine's noise does not move).
Removes the deployment after (`kimik3 destroy`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from support.realparts import demo_profile, write_profile  # noqa: E402

from bench.proxy_measure import GOAL, measure  # noqa: E402
from kimik3_demo.hub import FixtureHub  # noqa: E402
from kimik3_demo.prepare import demo_repos, prepare_hub_root  # noqa: E402

DEMO = ROOT / ".kimik3-demo"
KIMIK3 = [sys.executable, "-m", "kimik3_reconciler"]


def kimik3(work: Path, *args: str) -> None:
    env = {
        **os.environ,
        "KIMIK3_STATE_DIR": str(work / "state"),
        "HF_HOME": str(work / "hf-home"),
        "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
    }
    done = subprocess.run([*KIMIK3, *args], cwd=work, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"kimik3 {' '.join(args)} exited {done.returncode}:\n{done.stderr[-2000:]}")


def demo_hub() -> FixtureHub:
    """The demo's hub (its files made when missing), to serve while a bench deploys the demo."""
    prepare_hub_root(DEMO / "hub")
    return FixtureHub(demo_repos(DEMO / "hub"))


def deploy_demo(work: Path, hub_url: str, name: str, port: int, metrics: dict) -> None:
    """`kimik3 apply` of the demo profile as `name` on `port` with `metrics`, its state and caches under `work`."""
    profile = demo_profile(work, name, port, hub_url)
    profile["metrics"] = metrics
    write_profile(work, profile)
    kimik3(work, "apply", "profile.yaml", "--no-verify-server")


def measure_arguments(doc: str, rounds: int, name: str, port: int, proxy: str) -> argparse.ArgumentParser:
    """The arguments of a proxy's cost bench (this one's, bench/front.py's): rounds and load, the deployment's
    profile name and ports (`proxy`: what holds --port)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--requests", type=int, default=6, help="completions per client at c8")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--pairs", type=int, default=40, help=f"interleaved direct/{proxy} TTFT pairs per round")
    parser.add_argument("--name", default=name, help=f"profile name (container {name}…)")
    parser.add_argument("--port", type=int, default=port, help=f"the {proxy}'s port; llama-server +1, exporter +2")
    return parser


def main() -> None:
    parser = measure_arguments(__doc__, 3, "k3mx-bench", 19220, "proxy")
    parser.add_argument("--keep", action="store_true", help="deploy, print the URLs and leave it running")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kimik3-bench-proxy-", dir=DEMO))
    with demo_hub() as hub:
        deploy_demo(
            work, hub.url, args.name, args.port, {"port": args.port + 2, "proxy": True, "server_port": args.port + 1}
        )
        exporter = json.loads((work / "state" / "metrics" / args.name / "process.json").read_text())
        if args.keep:  # for profiling by hand; `kimik3 destroy` with KIMIK3_STATE_DIR=<work>/state removes it
            print(
                json.dumps(
                    {
                        "work": str(work),
                        "direct": f"http://127.0.0.1:{args.port + 1}",
                        "proxy": f"http://127.0.0.1:{args.port}",
                        "exporter_pid": exporter["pid"],
                    }
                )
            )
            return
        try:
            run(args, exporter["pid"])
        finally:
            kimik3(work, "destroy", "profile.yaml")
            shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, exporter_pid: int) -> None:
    result = measure(
        f"http://127.0.0.1:{args.port + 1}",
        f"http://127.0.0.1:{args.port}",
        exporter_pid,
        args.rounds,
        args.requests,
        args.tokens,
        args.pairs,
    )
    print(json.dumps({key: value for key, value in result.items() if key != "rows"} | {"goal": GOAL}))


if __name__ == "__main__":
    main()
