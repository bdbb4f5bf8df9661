"""Shared by the benchmarks: the demo profile, the environment kimik3 runs in, timing a whole command, and a scratch
folder removed after."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def scratch(on_disk: bool = False) -> Iterator[Path]:
    """A folder for a bench's files, removed after; `on_disk`: under .kimik3-demo/ where it exists (a disk, where the
    system's temporary folder may be a tmpfs that no write reaches a disk in)."""
    demo = ROOT / ".kimik3-demo"
    work = Path(tempfile.mkdtemp(prefix="kimik3-bench-", dir=demo if on_disk and demo.exists() else None))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)
