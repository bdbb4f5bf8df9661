"""Benchmark: this checkout's no-op `kimik3 plan` against another checkout's, measured in the same run (issue
25: the engine seam must not make a no-op plan slower; the plan now resolves the engine and renders the argv
through it).

    .venv/bin/python bench/plan_seam.py --baseline /path/to/other/checkout [--runs 15] [--profile FILE]

Both run `python -m kimik3_reconciler plan PROFILE` from their own root (their own code on the path), both
byte-compiled first, one uncounted warm-up each (page cache, dockerd, each checkout's profile cache entry: its
key holds model/*.py's bytes). Runs alternate (this, baseline, this, ...) so a busy machine slows both alike;
the ratio of the medians is the claim (goal: <= 1, within the spread the minimums show).
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import PROFILE, ROOT


def _timed(root: Path, profile: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(root)}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "kimik3_reconciler", "plan", profile], cwd=root, env=env, capture_output=True, check=True
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", required=True, help="the other checkout's root (e.g. the main branch's)")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--profile", default=str(PROFILE), help="the converged demo's profile")
    args = parser.parse_args()
    baseline = Path(args.baseline).resolve()
    for root in (ROOT, baseline):
        compileall.compile_dir(root / "kimik3_reconciler", quiet=1)
        _timed(root, args.profile)  # warm-up, uncounted
    this, other = [], []
    for _ in range(args.runs):
        this.append(_timed(ROOT, args.profile))
        other.append(_timed(baseline, args.profile))
    for name, times in (("this checkout", this), ("baseline", other)):
        print(f"{name:<14} median {statistics.median(times):.3f} s  min {min(times):.3f} s  max {max(times):.3f} s")
    print(
        f"{args.runs} runs each, alternating; this/baseline: {statistics.median(this) / statistics.median(other):.3f}"
        f" by medians, {min(this) / min(other):.3f} by minimums (goal <= 1)"
    )


if __name__ == "__main__":
    main()
