"""Benchmark: a no-op `kimik3 plan` on a converged host against the floor, measured in the same run.

    .venv/bin/python bench/plan.py [--runs 15] [--profile FILE]   # after `bash scripts/demo.sh`

`--profile`: the converged demo's profile when another checkout converged it (its relative paths, hence
its launch inputs, are that checkout's); the code measured is always this checkout's (run from its root).

- no-op plan: `kimik3 plan profiles/demo-cpu.yaml` (the demo converged: the plan says "no changes").
- floor (issue 13, goal: plan <= 3x floor): `python -c pass` + `docker ps` + `docker inspect` of the
  container, as commands: the least any tool that starts Python and asks dockerd must pay.
- import-only: `python -c "import kimik3_reconciler.cli"`; plan minus import-only is what observing,
  planning and printing cost.

Runs are interleaved (plan, floor, import, plan, ...) so a busy machine slows all three alike; the
medians give the ratio, the minimums (least disturbed run) and the spread say how noisy the machine was.
kimik3's modules are byte-compiled first, as an installed kimik3 is (a checkout run with
PYTHONDONTWRITEBYTECODE=1 would otherwise compile every module on every run).
"""

from __future__ import annotations

import argparse
import compileall
import statistics
import sys

from common import KIMIK3, PROFILE, ROOT, timed

CONTAINER = "kimi-k3-demo"


def _summary(name: str, times: list[float]) -> str:
    return f"{name:<13} median {statistics.median(times):.3f} s  min {min(times):.3f} s  max {max(times):.3f} s"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument(
        "--profile",
        default=str(PROFILE),
        help="the converged demo's profile (default: this checkout's profiles/demo-cpu.yaml)",
    )
    args = parser.parse_args()
    runs, profile = args.runs, args.profile
    compileall.compile_dir(ROOT / "kimik3_reconciler", quiet=1)
    timed([*KIMIK3, "plan", profile])  # warm the page cache and dockerd once, uncounted
    plan, floor, imports = [], [], []
    for _ in range(runs):
        plan.append(timed([*KIMIK3, "plan", profile]))
        floor.append(
            timed([sys.executable, "-c", "pass"]) + timed(["docker", "ps"]) + timed(["docker", "inspect", CONTAINER])
        )
        imports.append(timed([sys.executable, "-c", "import kimik3_reconciler.cli"]))
    ratio = statistics.median(plan) / statistics.median(floor)
    rest = statistics.median(plan) - statistics.median(imports)
    print(f"{runs} runs each, interleaved")
    print(_summary("no-op plan", plan))
    print(_summary("floor", floor) + "  (python -c pass + docker ps + docker inspect)")
    print(_summary("import-only", imports) + "  (python -c 'import kimik3_reconciler.cli')")
    print(f"ratio plan/floor: {ratio:.1f}x by medians, {min(plan) / min(floor):.1f}x by minimums (goal <= 3x)")
    print(f"plan minus import-only (observe, plan, print): {rest:.3f} s")


if __name__ == "__main__":
    main()
