"""Benchmark: what clients see while `kimik3 apply` replaces the server, with metrics.handover off and on, in one run.

    .venv/bin/python bench/handover.py [--workers 4] [--tokens 8] [--name k3ho-bench] [--port 19295]

For each mode the demo profile is deployed (as `--name`, ports `--port`..+2, its own state dir in a temp folder)
with `metrics: {proxy: true}` (off: today's proxy in the exporter) or `metrics: {proxy: true, handover: {}}` (on:
the front), a closed-loop client (tests/support/closed_loop.py: `--workers` threads, half streaming) runs through
serve.port, and `apply` changes serve.ubatch (4096 → 2048: the server is replaced). Printed per mode: requests,
failed (no answer, a non-200, an incomplete body; a failed client waits 0.2 s and sends again), p50 and p99 latency
of all requests, p99 of the complete ones, p50/p99 of those that overlapped the apply, and the apply's seconds;
then on/off ratios. The same machine, the same run: the ratio is what counts.
Removes each deployment after (`kimik3 destroy`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from support.closed_loop import ClosedLoop  # noqa: E402
from support.realparts import demo_hub, demo_profile, kimik3, write_profile  # noqa: E402


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def one_mode(hub_url: str, name: str, port: int, handover: bool, workers: int, tokens: int) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"kimik3-bench-{name}-") as folder:
        work = Path(folder)
        profile = demo_profile(work, name, port, hub_url)
        profile["metrics"] = {
            "port": port + 1,
            "proxy": True,
            "server_port": port + 2,
            **({"handover": {"drain_s": 30, "queue": 64, "wait_s": 600}} if handover else {}),
        }
        write_profile(work, profile)
        try:
            kimik3(work, "apply", "profile.yaml")
            profile["serve"]["ubatch"] = 2048
            write_profile(work, profile)
            with ClosedLoop(f"http://127.0.0.1:{port}", workers=workers, max_tokens=tokens, timeout_s=900) as load:
                load.wait_for(4 * workers)
                started = time.monotonic()
                result = kimik3(work, "apply", "profile.yaml", check=False)
                ended = time.monotonic()
                load.wait_for(load.done() + 4 * workers)
            if result.returncode != 0:
                raise SystemExit(f"apply exited {result.returncode}:\n{result.stderr[-2000:]}")
        finally:
            kimik3(work, "destroy", "profile.yaml", check=False)
    all_s = [o.seconds for o in load.outcomes]
    ok_s = [o.seconds for o in load.outcomes if o.complete]
    during = [o.seconds for o in load.between(started, ended)]
    return {
        "requests": len(load.outcomes),
        "failed": len(load.failed()),
        "apply_s": ended - started,
        "p50": quantile(all_s, 0.5),
        "p99": quantile(all_s, 0.99),
        "ok_p99": quantile(ok_s, 0.99),
        "during": len(during),
        "during_p50": quantile(during, 0.5),
        "during_p99": quantile(during, 0.99),
        "errors": sorted({o.error[:60] or str(o.status) for o in load.failed()})[:3],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--name", default="k3ho-bench")
    parser.add_argument("--port", type=int, default=19295)
    args = parser.parse_args()
    rows = {}
    with demo_hub() as hub:
        for mode, on in (("off", False), ("on", True)):
            rows[mode] = one_mode(hub.url, f"{args.name}-{mode}", args.port, on, args.workers, args.tokens)
    print(
        f"\n{'handover':8} {'requests':>8} {'failed':>6} {'apply s':>7} {'p50 s':>6} {'p99 s':>6} "
        f"{'ok p99':>6} {'overlap':>7} {'ov p50':>6} {'ov p99':>6}  errors"
    )
    for mode, r in rows.items():
        print(
            f"{mode:8} {r['requests']:8d} {r['failed']:6d} {r['apply_s']:7.1f} {r['p50']:6.2f} {r['p99']:6.2f} "
            f"{r['ok_p99']:6.2f} {r['during']:7d} {r['during_p50']:6.2f} {r['during_p99']:6.2f}  {'; '.join(r['errors'])}"
        )
    on, off = rows["on"], rows["off"]
    print(
        f"\non/off: failed {on['failed']}/{off['failed']}; p99 {on['p99'] / off['p99']:.2f}x, p99 of complete replies {on['ok_p99'] / off['ok_p99']:.2f}x; apply "
        f"{on['apply_s'] / off['apply_s']:.2f}x"
    )


if __name__ == "__main__":
    main()
