"""Benchmark: the front's cost when nothing is replaced (issue 38 item 12), on the demo's real llama-server, in one
run: through the front (`metrics.handover`: `kimik3 front-serve`, holding nothing) against llama-server's own port.

    .venv/bin/python bench/front.py [--rounds 5] [--requests 6] [--tokens 64] [--pairs 40] [--name k3fr-bench] \
        [--port 19380]

Deploys the demo profile (as `--name`, its own state dir under .kimik3-demo/) with
`metrics: {proxy: true, handover: {}}`: the front on `--port`, llama-server on 127.0.0.1:`--port`+1, the exporter
on +2. Then bench/proxy_measure.py's rounds (the same measuring core as the exporter's proxy, bench/proxy.py):
c8 aggregate tok/s direct and through the front, back to back, the order alternating; then interleaved c1 TTFT
pairs (the added TTFT of a round: the median of the paired differences). Prints each round, then the medians and
their ranges over the rounds against the goal (tok/s ratio >= 0.98, added TTFT p50 <= 2 ms), and the front's CPU
time per streamed token. Removes the deployment after (`kimik3 destroy`).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.proxy import DEMO, demo_hub, deploy_demo, kimik3, measure_arguments  # noqa: E402
from bench.proxy_measure import measure  # noqa: E402

GOAL = {"tok_s_ratio_c8": ">= 0.98", "ttft_p50_added_ms": "<= 2"}


def main() -> None:
    args = measure_arguments(__doc__, 5, "k3fr-bench", 19380, "front").parse_args()
    work = Path(tempfile.mkdtemp(prefix="kimik3-bench-front-", dir=DEMO))
    with demo_hub() as hub:
        deploy_demo(
            work,
            hub.url,
            args.name,
            args.port,
            {"port": args.port + 2, "proxy": True, "server_port": args.port + 1, "handover": {}},
        )
        front = json.loads((work / "state" / "front" / args.name / "process.json").read_text())
        try:
            result = measure(
                f"http://127.0.0.1:{args.port + 1}",
                f"http://127.0.0.1:{args.port}",
                front["pid"],
                args.rounds,
                args.requests,
                args.tokens,
                args.pairs,
            )
        finally:
            kimik3(work, "destroy", "profile.yaml")
            shutil.rmtree(work, ignore_errors=True)
    rows = result.pop("rows")
    added = sorted(r["ttft_added_ms"] for r in rows)
    print(
        json.dumps(
            result
            | {
                "tok_s_ratio_c8_rounds": [round(r["tok_s_ratio_c8"], 3) for r in rows],
                "ttft_added_ms_rounds": [round(r["ttft_added_ms"], 2) for r in rows],
                "ttft_added_ms_range": [added[0], added[-1]],
                "goal": GOAL,
            }
        )
    )


if __name__ == "__main__":
    main()
