"""The suite on a host it shares: nothing in the default run restarts dockerd (the test that does is deselected
unless KIMIK3_DOCKERD_RESTART_TEST=1), and a test that fails still stops the background processes it started
(tests/support/background.py), so it leaves no `kimik3 apply` holding the lock for the tests after it. Both run a
real pytest in a child process on a real test file."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
RESTART_TEST = TESTS / "integration" / "test_faults_dockerd_restart.py"


def _pytest(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_dockerd_restart_test_is_deselected_unless_asked_for() -> None:
    env = {k: v for k, v in os.environ.items() if k != "KIMIK3_DOCKERD_RESTART_TEST"}
    for value in (None, "0"):
        asked = env if value is None else {**env, "KIMIK3_DOCKERD_RESTART_TEST": value}
        unasked = _pytest("--collect-only", "-q", str(RESTART_TEST), cwd=TESTS.parent, env=asked)
        assert "1 deselected" in unasked.stdout and "::test_" not in unasked.stdout, unasked.stdout
    asked = _pytest(
        "--collect-only", "-q", str(RESTART_TEST), cwd=TESTS.parent, env={**env, "KIMIK3_DOCKERD_RESTART_TEST": "1"}
    )
    assert asked.returncode == 0 and "test_dockerd_restart_during_the_health_wait" in asked.stdout, asked.stdout


FAILING = """
import subprocess, sys

def test_starts_a_process_then_fails(background, tmp_path_factory):
    # a leader and a child of its own (as kimik3 apply runs docker): both must be gone after the teardown
    leader = background.start(["sh", "-c", "sleep 300 & echo $! > {pids}/child; exec sleep 300"])
    open("{pids}/leader", "w").write(str(leader.pid))
    while not __import__("os").path.exists("{pids}/child"):
        pass
    assert False, "a failure before the test's own kill"
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_failed_test_leaves_no_background_process_running(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    (tmp_path / "conftest.py").write_text(
        (TESTS / "conftest.py")
        .read_text()
        .replace("TESTS = Path(__file__).resolve().parent", f"TESTS = Path({str(TESTS)!r})")
    )
    (tmp_path / "test_inner.py").write_text(FAILING.format(pids=pids))
    inner = _pytest("-q", "test_inner.py", cwd=tmp_path, env=dict(os.environ))
    assert inner.returncode == 1 and "a failure before the test's own kill" in inner.stdout, inner.stdout[-3000:]
    started = [int((pids / name).read_text()) for name in ("leader", "child")]
    deadline = time.monotonic() + 10  # the child is reparented to init, which reaps it
    while any(_alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in started if _alive(pid)], "the failed test left its processes running"


KEPT = """
import pytest
pytestmark = pytest.mark.file_order
{tests}
"""
SHUFFLED = "\n".join(f"def test_free_{n}():\n    pass\n" for n in range(8))


def test_a_file_order_module_keeps_its_order_under_random_order(tmp_path: Path) -> None:
    """A module marked `file_order` (its tests build on one another: a known gap) runs in the file's order whatever
    the seed, while the other modules' tests are still shuffled."""
    (tmp_path / "conftest.py").write_text(
        (TESTS / "conftest.py")
        .read_text()
        .replace("TESTS = Path(__file__).resolve().parent", f"TESTS = Path({str(TESTS)!r})")
    )
    written = [f"test_step_{n}" for n in range(8)]
    (tmp_path / "test_kept.py").write_text(KEPT.format(tests="\n".join(f"def {n}():\n    pass\n" for n in written)))
    (tmp_path / "test_free.py").write_text(SHUFFLED)
    free_orders = set()
    # seeds far apart: pytest-randomly orders by crc32(f"{seed}::{nodeid}"), and nearby seeds give nearly one order
    for seed in (1, 987654, 4242424242):
        ran = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-p",
                "randomly",
                f"--randomly-seed={seed}",
                "--collect-only",
                "-q",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout.splitlines()
        kept = [line.split("::")[1] for line in ran if line.startswith("test_kept.py::")]
        assert kept == written, (seed, kept)
        free_orders.add(tuple(line for line in ran if line.startswith("test_free.py::")))
    assert len(free_orders) > 1, "the other module's tests were not shuffled: the check would pass without the marker"
