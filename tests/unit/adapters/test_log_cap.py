"""The exporter's log cap (adapters/log_cap.py): a log past the cap moves to `.1` and the writer's descriptors
go on in a fresh file, nothing lost; spawn caps it at each start too. Real files and descriptors in a temp dir."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from kimik3_reconciler.adapters.log_cap import LOG_FILE_ENV, open_log, rotate_if_over
from kimik3_reconciler.adapters.processes import LocalProcesses


def test_a_log_under_the_cap_stays_and_one_over_it_moves_to_dot_1_under_the_writers_feet(tmp_path: Path) -> None:
    log = tmp_path / "exporter.log"
    writer = os.dup(open_log(log))  # as the exporter's fd 2: a descriptor of the file, not of the path
    os.write(writer, b"a" * 100)
    assert not rotate_if_over(log, cap=100, fds=(writer,)) and log.stat().st_size == 100
    os.write(writer, b"b\n")
    assert rotate_if_over(log, cap=100, fds=(writer,))
    os.write(writer, b"after\n")
    os.close(writer)
    assert (tmp_path / "exporter.log.1").read_bytes() == b"a" * 100 + b"b\n"  # every byte before, in the old file
    assert log.read_bytes() == b"after\n"  # the writer goes on in the fresh one
    (tmp_path / "exporter.log").write_bytes(b"c" * 200)
    assert rotate_if_over(log, cap=100)  # a second rotation replaces the older backup: two files at most
    assert (tmp_path / "exporter.log.1").read_bytes() == b"c" * 200 and not log.exists()
    assert not rotate_if_over(log, cap=100)  # no log at all: nothing to do


def test_the_spawned_process_caps_its_own_log_while_it_runs(tmp_path: Path) -> None:
    """A child like the exporter: fds 1/2 on the log, KIMIK3_LOG_FILE naming it, cap_own_log's thread running."""
    log = tmp_path / "exporter.log"
    script = (
        "import sys, time; from kimik3_reconciler.adapters.log_cap import cap_own_log; "
        "cap_own_log(cap=1000, every_s=0.05); "
        "[print('x' * 99, file=sys.stderr, flush=True) or time.sleep(0.002) for _ in range(300)]; "
        "time.sleep(0.2); print('last', flush=True)"
    )
    out = open_log(log)
    root = Path(__file__).resolve().parents[3]
    child = subprocess.run(
        [sys.executable, "-c", script],
        stdout=out,
        stderr=subprocess.STDOUT,
        timeout=60,
        env={**os.environ, LOG_FILE_ENV: str(log), "PYTHONPATH": str(root)},
        check=True,
    )
    os.close(out)
    assert child.returncode == 0
    backup = tmp_path / "exporter.log.1"
    assert backup.exists() and log.stat().st_size < 30_000  # 30,000 bytes written: rotated along the way
    assert log.read_text().endswith("last\n")  # stdout followed the rotation too


def test_spawn_caps_the_log_before_a_start(tmp_path: Path) -> None:
    log = tmp_path / "metrics" / "k3" / "exporter.log"
    log.parent.mkdir(parents=True)
    log.write_text("an old exporter's crash loop\n")
    processes = LocalProcesses(tmp_path, log_cap=10)
    pid = processes.spawn(("--help",), "metrics/k3/exporter.log", ())
    deadline = time.monotonic() + 30
    while processes.cmdline(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.waitpid(pid, 0)
    assert (log.parent / "exporter.log.1").read_text() == "an old exporter's crash loop\n"
    assert "Usage:" in log.read_text()  # the new process's output, in a fresh file
