"""The suite on a host it shares: nothing in the default run restarts dockerd (the test that does is deselected
unless KIMIK3_DOCKERD_RESTART_TEST=1), and a test that fails still stops the background processes it started
(tests/support/background.py), so it leaves no `kimik3 apply` holding the lock for the tests after it; the order is
random, its seed printed, and no module is kept in its file's order. Each runs a real pytest in a child process on a
real test file."""

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


FREE = "\n".join(f"def test_free_{n}():\n    pass\n" for n in range(8))


def _collected(tmp_path: Path, seed: int) -> list[str]:
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
    said = f"test order: random, seed {seed} (again in this order: -p randomly --randomly-seed={seed})"
    assert ran.count(said) == 2, ran  # at the start and in the summary, under -q too
    return [line for line in ran if line.startswith("test_free.py::")]


def test_the_order_is_random_its_seed_printed_and_a_seed_gives_its_order_again(tmp_path: Path) -> None:
    """No module is kept in its file's order (each test sets up what it needs): the tests of one module come in
    another order under another seed, and the printed seed gives the same order again."""
    (tmp_path / "conftest.py").write_text(
        (TESTS / "conftest.py")
        .read_text()
        .replace("TESTS = Path(__file__).resolve().parent", f"TESTS = Path({str(TESTS)!r})")
    )
    (tmp_path / "test_free.py").write_text(FREE)
    # seeds far apart: pytest-randomly orders by crc32(f"{seed}::{nodeid}"), and nearby seeds give nearly one order
    orders = {seed: _collected(tmp_path, seed) for seed in (1, 987654, 4242424242)}
    assert all(len(order) == 8 for order in orders.values()), orders
    assert len({tuple(order) for order in orders.values()}) > 1, orders
    assert _collected(tmp_path, 987654) == orders[987654]
