"""A full state dir never leaves the host without a server (issue 30, item 1), on fakes: the room for the records an
apply writes after it takes the server down is checked before; a statistic that does not fit warns; any failure
after the server went down brings back the last good profile."""

from __future__ import annotations

import errno

import pytest
from support.fakes.state import full_for
from test_orchestrator import PROFILE, load, world  # noqa: F401 - `world` is a fixture

from kimik3_reconciler.errors import LocalFileError, StepError
from kimik3_reconciler.model.plan import Action, Step
from kimik3_reconciler.model.specs import ContainerSpec, LaunchContainer, StartContainer, StopContainer
from kimik3_reconciler.model.state_room import StateRoom, needed_bytes, records_after, shortfall, takes_server_down

CHANGED = PROFILE.replace("parallel: 2", "parallel: 2, ubatch: 2048")


class Events:
    """A reporter that keeps its events."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []

    def progress(self, task: str, done: int, total: int, **fields: object) -> None:
        pass

    def line(self, source: str, text: str) -> None:
        pass

    def event(self, name: str, **fields: object) -> None:
        self.events.append((name, fields))


def ubatch(docker) -> str:  # noqa: ANN001 - FakeDocker
    cmd = docker.containers["k3-test"]["Config"]["Cmd"]
    return cmd[cmd.index("--ubatch-size") + 1]


def running(docker) -> bool:  # noqa: ANN001
    return docker.containers["k3-test"]["State"]["Status"] == "running"


# the pure part: which steps take a server down, and what the records after them need -----------------------


def launch(replace: bool) -> LaunchContainer:
    container = ContainerSpec(name="k3-test", image="i", command=(), env=(), mounts=(), gpus="none", labels=())
    return LaunchContainer(container, replace=replace)


def test_a_replacement_or_a_stop_takes_a_server_down_and_a_first_launch_or_a_start_does_not() -> None:
    assert takes_server_down(launch(True)) and takes_server_down(StopContainer("other"))
    assert not takes_server_down(launch(False)) and not takes_server_down(StartContainer("k3-test"))


def test_each_record_needs_its_blocks_and_one_for_a_folder() -> None:
    steps = (Step("container", "k3-test", Action.REPLACE, "r", spec=launch(True)),)
    records = records_after(steps, {"text": "x" * 5000}, workers=0)
    assert [name for name, _ in records] == ["unverified", "last-good"]
    assert needed_bytes(records, 4096) == (1 + 1) * 4096 + (2 + 1) * 4096  # 256 B -> 1 block, ~5 KB -> 2
    assert shortfall(StateRoom("/s", 5 * 4096, 4096), records) is None
    short = shortfall(StateRoom("/s", 5 * 4096 - 1, 4096), records)
    assert short is not None and short.startswith("/s: 20.0 KiB free") and "last-good, unverified: 20.0 KiB" in short
    assert "inode" in (shortfall(StateRoom("/s", 10**9, 4096, free_files=3), records) or "")


# the apply ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("free", [0, 4096, 3 * 4096])
def test_a_state_dir_without_room_refuses_before_the_server_is_stopped(world, free):  # noqa: F811
    orchestrator, docker, _, _ = world
    orchestrator.apply_or_revert(load())
    calls = len(docker.calls)
    orchestrator.ports.state.free = free
    with pytest.raises(LocalFileError, match="nothing was stopped, the running server keeps serving") as refused:
        orchestrator.apply_or_revert(load(CHANGED))
    assert refused.value.exit_code == 8 and "state: " in str(refused.value)
    assert docker.calls[calls:] == [] and running(docker) and ubatch(docker) == "4096"  # the old one serves on
    orchestrator.ports.state.free = None  # space freed: the next apply converges to the new profile
    orchestrator.apply_or_revert(load(CHANGED))
    assert running(docker) and ubatch(docker) == "2048" and orchestrator.plan(load(CHANGED)).converged


def test_statistics_that_do_not_fit_warn_and_the_apply_converges_and_verifies(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    orchestrator.apply_or_revert(load())
    orchestrator.reporter = events = Events()
    state, real_write = orchestrator.ports.state, orchestrator.ports.state.write

    refused: list[str] = []

    def full_for_statistics(key: str, value: dict) -> None:
        if key.startswith(("host/", "load/", "apply/", "verify/")):
            refused.append(key)
            raise OSError(errno.ENOSPC, "No space left on device", f"state/{key}")
        real_write(key, value)

    state.write = full_for_statistics
    orchestrator.ports.http.loading_polls = 2  # the load takes time: its rate is measured and recorded
    checks: list[str] = []
    result = orchestrator.apply_or_revert(load(CHANGED), lambda: checks.append("verify"))
    assert checks == ["verify"] and result.final.converged and ubatch(docker) == "2048"
    warned = {fields["record"] for name, fields in events.events if name == "warning"}
    assert warned == set(refused) and {"load/k3-test.json", "apply/k3-test.json"} <= warned
    assert any(key.startswith("host/load-rate") for key in warned)  # the load-rate-warm.json
    assert state.read("last-good/k3-test.json")["text"] == load(CHANGED).text  # the revert target moved on


@pytest.mark.parametrize(
    "failure",
    [
        StepError("docker run k3-test: no space left on device"),
        OSError(errno.ENOSPC, "No space left on device", "/var/lib/docker/tmp"),
    ],
)
def test_a_failure_after_the_old_server_is_removed_brings_back_the_last_good_profile(world, failure):  # noqa: F811
    orchestrator, docker, _, _ = world
    orchestrator.apply_or_revert(load())
    real_run = docker.run_container

    def no_room_for_the_new_one(spec):  # dockerd's own disk fills between the removal and the run
        if "2048" in spec.command:
            raise failure
        return real_run(spec)

    docker.run_container = no_room_for_the_new_one
    with pytest.raises((StepError, LocalFileError), match="reverted to the last good profile") as failed:
        orchestrator.apply_or_revert(load(CHANGED))
    assert "no space left" in str(failed.value).lower()
    assert isinstance(failed.value, LocalFileError) == isinstance(failure, OSError)  # exit 8 for a local path
    assert running(docker) and ubatch(docker) == "4096"
    assert orchestrator.ports.state.read("apply/k3-test.json")["reverts"] == 1


def test_a_last_good_record_that_no_longer_fits_says_the_new_server_runs(world):  # noqa: F811
    """Room was checked, then another writer filled the disk before the apply's end."""
    orchestrator, docker, _, _ = world
    orchestrator.apply_or_revert(load())
    state = orchestrator.ports.state

    def another_writer_fills_the_disk() -> None:  # the check (verify) passes; meanwhile the disk filled up
        def full(key: str, value: dict) -> None:
            raise OSError(errno.ENOSPC, "No space left on device", f"state/{key}")

        state.write = full

    with pytest.raises(
        LocalFileError, match="k3-test runs and answers .* could not record it as the last good profile"
    ) as failed:
        orchestrator.apply_or_revert(load(CHANGED), another_writer_fills_the_disk)
    assert failed.value.exit_code == 8 and "state/last-good/k3-test.json" in str(failed.value)
    assert running(docker) and ubatch(docker) == "2048"  # verified, serving: nothing to revert
    del state.write  # room again: the next (converged) apply records it
    result = orchestrator.apply_or_revert(load(CHANGED), lambda: None)
    assert not result.changed and state.read("last-good/k3-test.json")["text"] == load(CHANGED).text


def test_without_a_last_good_profile_the_failure_says_no_server_runs(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    orchestrator.apply(load())  # converged, but never recorded as good (a tune candidate, an older kimik3)
    real_run = docker.run_container

    def refused(spec):
        if "2048" in spec.command:
            raise StepError("docker run k3-test: refused")
        return real_run(spec)

    docker.run_container = refused
    with pytest.raises(StepError, match="no server of k3-test runs now, and no last good profile is recorded"):
        orchestrator.apply_or_revert(load(CHANGED))


def test_the_launch_record_is_written_before_the_old_container_is_removed(world):  # noqa: F811
    orchestrator, docker, _, _ = world
    orchestrator.apply_or_revert(load())
    calls, real_write = len(docker.calls), orchestrator.ports.state.write

    def full_for_the_launch_record(key: str, value: dict) -> None:
        if key.startswith("unverified/"):
            raise OSError(errno.ENOSPC, "No space left on device", f"state/{key}")
        real_write(key, value)

    orchestrator.ports.state.write = full_for_the_launch_record
    with pytest.raises(LocalFileError, match="state/unverified/k3-test.json"):
        orchestrator.apply_or_revert(load(CHANGED), lambda: None)
    assert "rm k3-test" not in docker.calls[calls:] and running(docker) and ubatch(docker) == "4096"


def test_a_stopped_server_is_started_even_when_its_owed_verify_cannot_be_recorded(world):  # noqa: F811
    """Nothing serves: the apply that can start it must not be stopped by a full state dir (it still verifies)."""
    orchestrator, docker, _, _ = world
    orchestrator.apply_or_revert(load())
    docker.stop_container("k3-test")
    orchestrator.reporter = events = Events()
    full_for(orchestrator.ports.state, "unverified/")
    checks: list[str] = []
    orchestrator.apply_or_revert(load(), lambda: checks.append("verify"))
    assert running(docker) and checks == ["verify"]
    assert ("warning", "unverified/k3-test.json") in [(n, f.get("record")) for n, f in events.events]


def test_the_apply_record_cannot_fail_a_converged_apply_or_replace_a_failure(world):  # noqa: F811
    """The apply record is a statistic on its read side too (review of the merge): a dockerd gone past its retry
    when the record inspects what converged, or a state dir that cannot be read, leaves the apply's own outcome."""
    orchestrator, docker, _, _ = world
    orchestrator.apply_or_revert(load())
    real_inspect, real_read = docker.inspect_container, orchestrator.ports.state.read

    def gone(name: str):  # noqa: ANN202 - the fake's signature
        raise StepError("docker: the daemon is gone")

    real_record = orchestrator._record_apply

    def record_with_docker_gone(name, failure):  # noqa: ANN001, ANN202 - the apply's end: dockerd went away
        docker.inspect_container = gone
        try:
            real_record(name, failure)
        finally:
            docker.inspect_container = real_inspect

    orchestrator._record_apply = record_with_docker_gone
    result = orchestrator.apply_or_revert(load(CHANGED))  # converges; the record says so without a fingerprint
    assert result.final.converged and ubatch(docker) == "2048"
    assert orchestrator.ports.state.read("apply/k3-test.json")["fingerprint"] is None
    orchestrator._record_apply = real_record

    def unreadable(key: str):  # noqa: ANN202
        if key.startswith("apply/"):
            raise OSError(errno.EIO, "Input/output error", f"state/{key}")
        return real_read(key)

    orchestrator.ports.state.read = unreadable
    result = orchestrator.apply_or_revert(load())
    assert result.final.converged and ubatch(docker) == "4096"
