"""Benchmark: what clients see while kimik3 replaces a helper that owns the public port (issue 38 item 2), stopped
then started (how every replacement ran before, and how a helper an older kimik3 started is still replaced) against
handed over (its listening sockets taken by the new process), both in one run.

    .venv/bin/python bench/helper_swap.py [--reps 5] [--workers 4]

For each helper (the exporter with `metrics.proxy` and no front; the front) and each way, `--reps` times: the helper
is started as apply starts it (steps, real processes) in front of a llama-server look-alike, `--workers` closed-loop
clients (tests/support/closed_loop.py: keep-alive, half streaming; a failed client waits 0.2 s and sends again) run
through the public port for 1 s, the helper is replaced (a new fingerprint), and the clients run 1 s more. Printed:
per repetition the requests, those refused (nothing listened), those failed (refused included), those that overlapped
the swap, the swap's seconds; then the median and the range of the refused over the repetitions.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from support.helper_swap import swap_under_load  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    print("| helper | replaced by | rep | requests | refused | failed | overlapping the swap | swap s |")
    print("|---|---|---|---|---|---|---|---|")
    summary = []
    for helper in ("exporter", "front"):
        for hand_over in (False, True):
            way = "handover" if hand_over else "stop, then start"
            refused = []
            for rep in range(1, args.reps + 1):
                with tempfile.TemporaryDirectory(prefix="kimik3-bench-swap-") as folder:
                    r = swap_under_load(Path(folder), helper, hand_over, workers=args.workers)
                refused.append(r.refused)
                print(
                    f"| {helper} | {way} | {rep} | {r.requests} | {r.refused} | {r.failed} | {r.overlapping} | "
                    f"{r.swap_s:.2f} |",
                    flush=True,
                )
            summary.append((helper, way, statistics.median(refused), min(refused), max(refused)))
    print("\n| helper | replaced by | refused, median | range |")
    print("|---|---|---|---|")
    for helper, way, median, low, high in summary:
        print(f"| {helper} | {way} | {median:g} | {low}-{high} |")


if __name__ == "__main__":
    main()
