"""The real `kimik3` writing into a real pipe whose reader goes early, as `kimik3 … | head -1` does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_into_closed_pipe(args: list[str], cwd: Path, read_first_line: bool) -> tuple[int, str]:
    """Run `kimik3 ARGS` in `cwd` (its own state dir) with stdout a pipe whose reader reads one line (`| head -1`)
    or nothing, then closes: (exit code, stderr)."""
    env = {
        **os.environ,
        "KIMIK3_STATE_DIR": str(cwd / "state"),
        "KIMIK3_CACHE_DIR": str(cwd / "cache"),
        "KIMIK3_HOST_LOCK": "off",
        "HF_HOME": str(cwd / "hf-home"),
        "PYTHONPATH": str(ROOT),
    }
    read_end, write_end = os.pipe()
    child = subprocess.Popen(
        [sys.executable, "-m", "kimik3_reconciler", *args],
        stdout=write_end,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        text=True,
    )
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        if read_first_line:
            assert reader.readline(), "nothing came before the pipe closed"
    _, err = child.communicate(timeout=120)
    return child.returncode, err
