"""The per-host lock against real parts: ≥ 5 `kimik3 apply` processes at once on one state dir, the
real dockerd, the demo's CPU image, the fixture hub. Exactly one container launch, ever; the others
exit 0 (they waited, then found the host converged) or 5 (locked, naming the holder), never with a
raw Docker error. Docker's own event stream counts the launches.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.background import Background
from support.demo_work import demo_on_hub_port
from support.realparts import KIMIK3, docker, kimik3

from kimik3_reconciler.adapters.host_lock import StateDirLock
from kimik3_reconciler.adapters.state_files import SystemClock
from kimik3_reconciler.locking import new_holder

pytestmark = pytest.mark.docker

NAME, PORT, HUB_PORT = "k3un-lock-apply", 18600, 18601
APPLIES = 6
TRIES = 5  # rounds of concurrent applies after a removal: one launch in each


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from demo_on_hub_port(tmp_path_factory.mktemp("k3-lock"), NAME, PORT, HUB_PORT)


def env_for(work: Path, state: str = "state") -> dict[str, str]:
    return {**os.environ, "KIMIK3_STATE_DIR": str(work / state), "HF_HOME": str(work / "hf-home")}


def concurrent_applies(
    background: Background, work: Path, *options: str, states: tuple[str, ...] = ("state",)
) -> list[subprocess.CompletedProcess[str]]:
    """APPLIES real `kimik3 apply` processes started together (spread over the state dirs `states`); their
    results once all have exited (those still running when the test fails are killed at its teardown)."""
    procs = [
        background.start(
            [*KIMIK3, "apply", *options, "profile.yaml"],
            cwd=work,
            env=env_for(work, states[i % len(states)]),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(APPLIES)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results


def launches(since: float, until: float) -> list[str]:
    """Docker's events for our container in that window: `create` and `start` are launches."""
    actions = docker(
        "events",
        "--since",
        f"{since:.3f}",
        "--until",
        f"{until:.3f}",
        "--filter",
        f"container={NAME}",
        "--filter",
        "type=container",
        "--format",
        "{{.Action}}",
    ).split()
    return [a for a in actions if a in ("create", "start")]


def identity() -> tuple[str, ...]:
    return tuple(docker("inspect", "-f", "{{.Id}} {{.State.StartedAt}}", NAME).split())


def assert_no_raw_errors(results: list[subprocess.CompletedProcess[str]]) -> None:
    for r in results:
        for raw in ("Traceback", "Conflict", "already in progress"):
            assert raw not in r.stderr, f"exit {r.returncode}, raw error {raw!r}:\n{r.stderr[-3000:]}"
        assert not re.search(r"\b409\b", r.stderr), r.stderr[-3000:]  # Docker's status code, not in a timestamp


def test_concurrent_first_applies_launch_once_and_the_others_exit_5_naming_the_holder(
    workdir: Path, background: Background
) -> None:
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)  # a first launch, whatever ran before
    since = time.time()
    results = concurrent_applies(background, workdir)  # default --lock-timeout 0: fail at once
    until = time.time() + 1
    assert_no_raw_errors(results)
    assert {r.returncode for r in results} == {0, 5}, [(r.returncode, r.stderr[-2000:]) for r in results]
    # One launched; one started so late that the launch was over would find the host converged.
    assert sum(f"{NAME}: converged after" in r.stdout for r in results) == 1
    assert all(
        "no changes (converged)" in r.stdout for r in results if r.returncode == 0 and "converged after" not in r.stdout
    )
    for loser in (r for r in results if r.returncode == 5):
        assert f"the host is locked by another kimik3: apply of {NAME} by pid" in loser.stderr
        assert "kimik3 force-unlock " in loser.stderr and "Nothing was changed" in loser.stderr
    assert launches(since, until) == ["create", "start"]
    assert docker("inspect", "-f", "{{.State.Status}}", NAME) == "running"


@pytest.mark.parametrize("attempt", range(TRIES))
def test_concurrent_applies_that_wait_relaunch_a_removed_container_once(
    workdir: Path, attempt: int, background: Background
) -> None:
    docker("rm", "-f", NAME)
    since = time.time()
    results = concurrent_applies(background, workdir, "--lock-timeout", "10m")
    until = time.time() + 1
    print(
        f"try {attempt + 1}: {APPLIES} waiting applies after docker rm -f: {until - 1 - since:.1f} s wall, "
        f"{sum(r.stderr.count('waiting for the host lock') for r in results)} lock-wait lines"
    )
    assert_no_raw_errors(results)
    assert [r.returncode for r in results] == [0] * APPLIES, [r.stderr[-2000:] for r in results]
    changed = [r for r in results if "converged after" in r.stdout]
    assert len(changed) == 1, [r.stdout for r in results]
    assert sum("no changes (converged)" in r.stdout for r in results) == APPLIES - 1
    assert any("waiting for the host lock, held by apply of" in r.stderr for r in results)  # whom they waited for
    # One line per waiting apply, however long it waited (issue 39: 40 `lock-wait` JSON lines in one wait).
    assert all(r.stderr.count("waiting for the host lock") <= 1 for r in results), [r.stderr for r in results]
    assert launches(since, until) == ["create", "start"]


def test_concurrent_applies_on_a_converged_host_touch_nothing(workdir: Path, background: Background) -> None:
    kimik3(workdir, "apply", "profile.yaml")  # converged, whatever ran before (a no-op when it already is)
    before, since = identity(), time.time()
    results = concurrent_applies(background, workdir, "--lock-timeout", "5m")
    until = time.time() + 1
    assert_no_raw_errors(results)
    assert [r.returncode for r in results] == [0] * APPLIES
    assert all("no changes (converged)" in r.stdout for r in results)
    assert launches(since, until) == [] and identity() == before


def test_an_apply_killed_with_sigkill_leaves_a_lock_the_next_apply_takes_over(
    workdir: Path, background: Background
) -> None:
    docker("rm", "-f", NAME)
    record = workdir / "state" / "lock" / "holder.json"
    proc = background.start(
        [*KIMIK3, "apply", "profile.yaml"],
        cwd=workdir,
        env=env_for(workdir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not record.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert record.exists(), "the apply never took the lock"
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert record.exists()  # the record stays; the kernel dropped the flock with the process
    after = kimik3(workdir, "apply", "profile.yaml")
    assert "lock-taken-over" in after.stderr and f"pid {proc.pid}" in after.stderr
    assert docker("inspect", "-f", "{{.State.Status}}", NAME) == "running"
    assert not record.exists()


def test_a_kimik3_with_another_state_dir_is_kept_out_by_the_host_wide_lock(workdir: Path) -> None:
    """Two users (two state dirs) on one host: the host-wide lock (KIMIK3_HOST_LOCK, /run/lock/kimik3.lock by
    default) refuses the second, naming the first, though its own state dir is free."""
    other = StateDirLock(workdir / "other-user-state", Path(os.environ["KIMIK3_HOST_LOCK"]))
    holder = new_holder("apply", "someone-elses-profile", SystemClock())
    assert other.try_acquire(holder).acquired
    try:
        refused = kimik3(workdir, "apply", "profile.yaml", check=False)
        assert refused.returncode == 5, refused.stderr[-2000:]
        assert f"locked by another kimik3: apply of someone-elses-profile by pid {os.getpid()}" in refused.stderr
        status = kimik3(workdir, "status", "profile.yaml")
        assert "lock       held: apply of someone-elses-profile" in status.stdout
    finally:
        other.release(holder)


def test_concurrent_applies_from_two_state_dirs_launch_once(workdir: Path, background: Background) -> None:
    docker("rm", "-f", NAME)
    since = time.time()
    results = concurrent_applies(background, workdir, "--lock-timeout", "10m", states=("state", "second-state"))
    until = time.time() + 1
    assert_no_raw_errors(results)
    assert [r.returncode for r in results] == [0] * APPLIES, [r.stderr[-2000:] for r in results]
    assert launches(since, until) == ["create", "start"]
    assert docker("inspect", "-f", "{{.State.Status}}", NAME) == "running"


def test_force_unlock_names_a_wrong_id_and_destroy_takes_the_lock(workdir: Path) -> None:
    wrong = kimik3(workdir, "force-unlock", "0123456789ab", check=False)
    assert wrong.returncode == 2 and "the host is not locked" in wrong.stderr
    kimik3(workdir, "destroy", "profile.yaml")
    assert subprocess.run(["docker", "inspect", NAME], capture_output=True).returncode != 0
    assert not (workdir / "state" / "lock" / "holder.json").exists()
