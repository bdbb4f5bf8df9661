"""`kimik3 reconcile`'s passes on the fakes (with the real flock adapter on a temp state dir):
converge, no-op, broken file, locked host, back-off after a failed apply, signals."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest
from support.fakes import FAKE_PROFILE, FAKE_REVISION, FakeHub, fake_ports
from support.fakes.state import full_for

from kimik3_reconciler.adapters.host_lock import StateDirLock
from kimik3_reconciler.cli import load
from kimik3_reconciler.locking import new_holder
from kimik3_reconciler.orchestrator import Orchestrator
from kimik3_reconciler.reconcile import ReconcileLoop, run_until_stopped
from kimik3_reconciler.steps.report import NullReporter

FILES = {
    "UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00002.gguf": b"shard-one" * 10,
    "UD-Q2_K_XL/k3-UD-Q2_K_XL-00002-of-00002.gguf": b"shard-two" * 10,
}
INTERVAL = 180.0


class World:
    def __init__(self, tmp_path: Path):
        (tmp_path / "src.tar.gz").write_bytes(b"source")
        (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
        self.ports, self.docker = fake_ports(FakeHub("org/k3", FAKE_REVISION, FILES, tmp_path / "hub"))
        self.ports.lock = StateDirLock(tmp_path / "state")
        self.clock = self.ports.clock
        self.profile = tmp_path / "profile.yaml"
        self.profile.write_text(FAKE_PROFILE)
        self.lines: list[dict] = []
        orchestrator = Orchestrator(self.ports, NullReporter(), tmp_path, tmp_path / "Dockerfile.llamacpp")
        self.loop = ReconcileLoop(
            str(self.profile), orchestrator, load, self.lines.append, INTERVAL, verify_server=False
        )

    def mutations(self) -> list[str]:
        return list(self.docker.calls)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def test_a_pass_applies_changes_and_a_converged_pass_is_one_plan(world: World) -> None:
    first = world.loop.run_pass()
    assert first["result"] == "changed" and first["exit_code"] == 0 and first["profile"] == "k3-test"
    assert [s.split()[:2] for s in first["steps"]] == [
        ["model", "create"],
        ["image", "create"],
        ["preread", "read"],
        ["container", "create"],
        ["health", "read"],
    ]
    assert "container create k3-test" in first["steps"]
    calls = world.mutations()
    second = world.loop.run_pass()
    assert (second["result"], second["steps"], second["rounds"]) == ("converged", [], 1)
    assert world.mutations() == calls  # nothing launched, built or pulled
    assert set(second) >= {"time", "file", "profile", "result", "steps", "duration_s", "exit_code"}
    assert json.loads(json.dumps(world.lines)) == world.lines  # each pass is one JSON line
    assert StateDirLock(world.profile.parent / "state").holder() == (None, False)  # released after each pass


def test_a_broken_profile_is_logged_and_the_host_is_left_alone(world: World) -> None:
    world.loop.run_pass()
    calls, container = world.mutations(), dict(world.docker.containers["k3-test"])
    world.profile.write_text(FAKE_PROFILE.replace("ctx_size:", "ctx_sise:"))
    broken = world.loop.run_pass()
    assert broken["result"] == "error" and broken["exit_code"] == 2
    assert "profile.yaml:" in broken["error"] and "did you mean 'ctx_size'" in broken["error"]
    assert broken["profile"] == "k3-test" and broken["serving"].startswith("k3-test as last parsed at")
    world.profile.unlink()
    missing = world.loop.run_pass()
    assert missing["result"] == "error" and "cannot read" in missing["error"]
    assert world.mutations() == calls and world.docker.containers["k3-test"] == container


def test_a_pass_finding_another_kimik3_at_work_is_skipped(world: World) -> None:
    other, holder = StateDirLock(world.profile.parent / "state"), new_holder("apply", "k3-test", world.clock)
    assert other.try_acquire(holder).acquired
    skipped = world.loop.run_pass()
    assert (skipped["result"], skipped["exit_code"], skipped["holder"]) == ("locked", 5, holder.id)
    assert "apply of k3-test" in skipped["error"]
    assert world.docker.calls == [] and world.docker.containers == {}
    other.release(holder)
    assert world.loop.run_pass()["result"] == "changed"


def test_a_failed_apply_backs_off_doubling_until_the_file_changes(world: World) -> None:
    world.docker.crash_on_start = True
    failed = world.loop.run_pass()
    assert failed["result"] == "error" and failed["exit_code"] == 1 and "loading" in failed["error"]
    assert (failed["failures"], failed["retry_in_s"]) == (1, 2 * INTERVAL)
    calls = world.mutations()
    world.clock.sleep(INTERVAL)
    waiting = world.loop.run_pass()
    assert (waiting["result"], waiting["retry_in_s"]) == ("backoff", INTERVAL)
    assert world.mutations() == calls  # the failing profile is not relaunched every interval
    world.clock.sleep(INTERVAL)
    world.docker.containers.clear()  # the failed container is gone: the retry launches (and fails) again
    again = world.loop.run_pass()
    assert (again["result"], again["failures"], again["retry_in_s"]) == ("error", 2, 4 * INTERVAL)
    world.docker.crash_on_start = False
    world.profile.write_text(FAKE_PROFILE.replace("parallel: 2", "parallel: 1"))  # an edit ends the wait
    assert world.loop.run_pass()["result"] == "changed"


def test_waits_with_and_without_jitter(world: World) -> None:
    assert world.loop.next_wait() == INTERVAL
    world.loop.jitter, world.loop.rng = True, random.Random(7)
    waits = [world.loop.next_wait() for _ in range(50)]
    assert all(INTERVAL <= w < 1.1 * INTERVAL for w in waits) and len(set(waits)) == 50


def signal_soon(signum: int, after_s: float) -> threading.Timer:
    timer = threading.Timer(after_s, os.kill, (os.getpid(), signum))
    timer.start()
    return timer


def test_sigterm_between_passes_stops_cleanly(world: World) -> None:
    signal_soon(signal.SIGTERM, 0.5)
    started = time.monotonic()
    assert run_until_stopped(world.loop) == 0
    assert time.monotonic() - started < 5  # not the 180 s interval
    assert [line["result"] for line in world.lines] == ["changed", "stopped"]
    assert world.lines[-1]["signal"] == "SIGTERM" and world.lines[-1]["interrupted_pass"] is False


def test_sigint_during_a_pass_interrupts_it_and_releases_the_lock(world: World) -> None:
    launch = world.docker.run_container

    def slow_launch(spec):  # noqa: ANN001, ANN202 - stands in for a long step (a download, a load)
        time.sleep(30)
        return launch(spec)

    world.docker.run_container = slow_launch
    signal_soon(signal.SIGINT, 0.5)
    started = time.monotonic()
    assert run_until_stopped(world.loop) == 0
    assert time.monotonic() - started < 5
    assert world.lines[-1]["result"] == "stopped" and world.lines[-1]["interrupted_pass"] is True
    assert StateDirLock(world.profile.parent / "state").holder() == (None, False)


def test_relative_paths_follow_a_swapped_checkout_symlink(tmp_path: Path) -> None:
    world = World(tmp_path)
    with_patch = FAKE_PROFILE.replace("archive: src.tar.gz}", "archive: src.tar.gz, patches: [fix.patch]}")
    for checkout, profile in (("rev-a", FAKE_PROFILE), ("rev-b", with_patch)):
        (tmp_path / checkout).mkdir()
        (tmp_path / checkout / "src.tar.gz").write_bytes(b"source")
        (tmp_path / checkout / "profile.yaml").write_text(profile)
    (tmp_path / "rev-b" / "fix.patch").write_text("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")  # only in rev-b
    (tmp_path / "current").symlink_to("rev-a")
    world.loop.path = str(tmp_path / "current" / "profile.yaml")
    assert world.loop.run_pass()["result"] == "changed"
    assert world.loop.run_pass()["result"] == "converged"
    (tmp_path / "next").symlink_to("rev-b")
    os.replace(tmp_path / "next", tmp_path / "current")  # as git-sync publishes a new revision
    swapped = world.loop.run_pass()
    assert "image create kimi-k3-llamacpp:mainline-ad1de39-cpu" in swapped.get("steps", ()), swapped.get("error")


# two loops for conflicting profiles do not stop each other forever ---------------------------------------


def second_loop(world: World) -> tuple[ReconcileLoop, list[dict]]:
    """A loop for profile k3-b on the same host and port as the world's k3-test: they conflict."""
    other = world.profile.parent / "b.yaml"
    other.write_text(FAKE_PROFILE.replace("name: k3-test", "name: k3-b"))
    lines: list[dict] = []
    orchestrator = Orchestrator(
        world.ports, NullReporter(), world.profile.parent, world.profile.parent / "Dockerfile.llamacpp"
    )
    return ReconcileLoop(str(other), orchestrator, load, lines.append, INTERVAL, verify_server=False), lines


def test_a_loop_refuses_to_stop_a_container_another_loop_keeps_running(world: World) -> None:
    assert world.loop.run_pass()["result"] == "changed"  # loop A runs k3-test
    loop_b, _ = second_loop(world)
    calls = world.mutations()
    refused = loop_b.run_pass()
    assert (refused["result"], refused["exit_code"]) == ("conflict", 3)
    assert (
        "would stop k3-test" in refused["error"] and "another reconcile loop keeps k3-test running" in refused["error"]
    )
    assert (
        f"kimik3 reconcile {world.profile.resolve()}" in refused["error"] and f"pid {os.getpid()}" in refused["error"]
    )
    assert world.mutations() == calls and world.docker.containers["k3-test"]["State"]["Status"] == "running"
    assert world.loop.run_pass()["result"] == "converged"  # A is left alone: no flapping
    world.loop.forget()  # loop A stops (run_until_stopped does this on SIGTERM)
    taken = loop_b.run_pass()
    assert taken["result"] == "changed" and "conflict update k3-test" in taken["steps"]
    assert world.docker.containers["k3-test"]["State"]["Status"] == "exited"


def test_a_timer_loop_counts_while_its_passes_keep_coming_and_not_after(world: World) -> None:
    """`reconcile --once` from a timer: its process is gone between passes, its record's last pass says it is alive."""
    from kimik3_reconciler.model.records import reconcile_loop_key

    world.loop.run_pass()
    key = reconcile_loop_key("k3-test")
    record = world.ports.state.read(key)
    gone = subprocess_pid_that_exited()
    world.ports.state.write(key, {**record, "holder": {**record["holder"], "pid": gone}})
    loop_b, _ = second_loop(world)
    assert loop_b.run_pass()["result"] == "conflict"  # last pass just now: the timer is alive
    world.clock.sleep(2 * INTERVAL + 61)
    assert loop_b.run_pass()["result"] == "changed"  # no pass for two intervals: that loop is gone


def subprocess_pid_that_exited() -> int:
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_full_state_dir_does_not_end_the_loop_and_the_pass_still_converges(world: World) -> None:
    """Issue 30: the loop's own record failing with ENOSPC raised out of the pass and ended `kimik3 reconcile`
    (exit 8), leaving nothing to bring a server back. The pass now says so in its line and goes on."""
    full_for(world.ports.state, "reconcile/")
    line = world.loop.run_pass()
    assert line["result"] == "changed" and line["exit_code"] == 0
    assert line["warning"].startswith("loop record not refreshed: state/reconcile/k3-test.json: no space left")
    assert world.docker.containers["k3-test"]["State"]["Status"] == "running"
