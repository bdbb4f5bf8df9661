"""Shared by the benchmarks: the demo profile, the environment kimik3 runs in, and timing a whole command."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "profiles" / "demo-cpu.yaml"
KIMIK3 = [sys.executable, "-m", "kimik3_reconciler"]
ENV = dict(os.environ)  # kimik3 as a user runs it: its default state dir (scripts/demo.sh uses it too)


def timed(argv: list[str]) -> float:
    """Wall time of a command run to completion (a failure raises)."""
    start = time.perf_counter()
    subprocess.run(argv, capture_output=True, env=ENV, check=True)
    return time.perf_counter() - start
