"""The worker lock adapter (adapters/worker_lock.py) on the real dockerd: a never-started container is the lock,
the same run reaching one Docker twice holds it once, another run is refused naming the holder, and
force-unlock removes it. Its own container name (k3gaps-…): the suite may share the daemon with a real worker lock."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.realparts import docker

from kimik3_reconciler.adapters.docker_engine import DockerEngine
from kimik3_reconciler.adapters.host_lock import StateDirLock
from kimik3_reconciler.adapters.worker_lock import DockerHostLock
from kimik3_reconciler.locking import OtherHost, force_unlock
from kimik3_reconciler.model.host_lock import LockHolder
from kimik3_reconciler.model.specs import DockerHost

pytestmark = pytest.mark.docker
NAME = "k3gaps-host-lock"
HERE = DockerHost("w1", "unix:///var/run/docker.sock")


def holder(lock_id: str) -> LockHolder:
    return LockHolder(
        id=lock_id,
        operation="apply",
        profile="k3gaps",
        pid=4242,
        host="another-main-host",
        started="2026-12-03T04:24:03+00:00",
    )


@pytest.fixture
def lock() -> Iterator[DockerHostLock]:
    if subprocess.run(["docker", "info"], capture_output=True, check=False).returncode:
        pytest.fail("no Docker daemon answers: run scripts/ensure-docker.sh (CI does)")
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True, check=False)
    yield DockerHostLock(DockerEngine(), "w1", container=NAME)
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True, check=False)


def test_the_lock_container_excludes_another_run_and_force_unlock_removes_it(
    lock: DockerHostLock, tmp_path: Path
) -> None:
    first, second = holder("aaaaaaaaaaaa"), holder("bbbbbbbbbbbb")
    assert lock.try_acquire(first).acquired
    assert docker("inspect", "-f", "{{.State.Status}}", NAME) == "created"  # never started: it only holds a name
    # The same run reaching this Docker again (another URL of one host, two workers on it): held once, no wait.
    assert DockerHostLock(DockerEngine(), "w1-again", container=NAME).try_acquire(first).acquired
    refused = lock.try_acquire(second)
    assert not refused.acquired and refused.holder == first
    assert lock.holder() == (first, True)  # a holder of another host is never guessed dead
    said = force_unlock(StateDirLock(tmp_path), first.id, [(OtherHost(HERE), lock)])
    assert said == f"removed lock {first.id} on rpc worker w1 ({HERE.url}) ({first.describe()})"
    assert subprocess.run(["docker", "inspect", NAME], capture_output=True, check=False).returncode != 0
    assert lock.try_acquire(second).acquired
    lock.release(first)  # the hung run finishing later leaves the next holder's lock alone
    assert lock.holder()[0] == second
