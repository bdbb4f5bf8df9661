"""`kimik3 reconcile` against real parts: the loop as a subprocess (`--interval 2s`) on the real dockerd,
the demo's CPU image and the fixture hub. It relaunches its container after a `docker rm -f`, leaves
the host alone while the profile file does not parse, skips a pass while another kimik3 holds the
lock, and exits 0 on SIGTERM. Its JSON lines on stdout are what the assertions read.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.background import Background
from support.demo_work import demo_on_hub_port
from support.realparts import KIMIK3, docker, kimik3

from kimik3_reconciler.adapters.host_lock import StateDirLock
from kimik3_reconciler.adapters.state_files import SystemClock
from kimik3_reconciler.locking import new_holder

pytestmark = pytest.mark.docker

NAME, PORT, HUB_PORT = "k3-lock-loop", 19110, 19111


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from demo_on_hub_port(tmp_path_factory.mktemp("k3-lock-loop"), NAME, PORT, HUB_PORT)


class Loop:
    """`kimik3 reconcile` running in the background; its stdout lines, parsed, in a queue."""

    def __init__(self, background: Background, work: Path, *args: str):
        env = {**os.environ, "KIMIK3_STATE_DIR": str(work / "state"), "HF_HOME": str(work / "hf-home")}
        self.stderr = (work / "reconcile.stderr").open("w")
        self.proc = background.start(
            [*KIMIK3, "reconcile", *args], cwd=work, env=env, text=True, stdout=subprocess.PIPE, stderr=self.stderr
        )
        self.lines: queue.Queue[dict] = queue.Queue()
        self.seen: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            self.lines.put(json.loads(raw))

    def wait_for(self, wanted: Callable[[dict], bool], timeout_s: float) -> dict:
        while True:
            try:
                line = self.lines.get(timeout=timeout_s)
            except queue.Empty:
                raise AssertionError(f"no such pass within {timeout_s}s; passes: {self.seen[-5:]}") from None
            self.seen.append(line)
            if wanted(line):
                return line

    def stop(self, signum: int) -> int:
        self.proc.send_signal(signum)
        return self.proc.wait(timeout=60)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()


def result_is(*results: str) -> Callable[[dict], bool]:
    return lambda line: line["result"] in results


def identity() -> tuple[str, ...]:
    return tuple(docker("inspect", "-f", "{{.Id}} {{.State.StartedAt}}", NAME).split())


def test_reconcile_relaunches_after_docker_rm_and_leaves_the_host_alone_on_a_broken_file(
    workdir: Path, background: Background
) -> None:
    profile = workdir / "profile.yaml"
    good = profile.read_text()
    subprocess.run(
        ["docker", "rm", "-f", NAME], capture_output=True
    )  # a launch for the first pass, whatever ran before
    loop = Loop(background, workdir, "--interval", "2s", "profile.yaml")
    try:
        first = loop.wait_for(result_is("changed", "converged", "error"), 900)
        assert first["result"] == "changed" and f"container create {NAME}" in first["steps"], first
        noop = loop.wait_for(lambda _: True, 60)
        assert noop["result"] == "converged" and noop["steps"] == [], noop
        print(f"converged pass: {noop['duration_s']} s")

        docker("rm", "-f", NAME)  # ours: the loop must notice on its next pass and launch it again
        relaunched = loop.wait_for(result_is("changed"), 300)
        assert f"container create {NAME}" in relaunched["steps"], relaunched
        assert docker("inspect", "-f", "{{.State.Status}}", NAME) == "running"
        assert all(line["result"] in ("converged", "changed") for line in loop.seen), loop.seen

        before = identity()
        profile.write_text(good.replace("ubatch:", "ubatc:"))
        broken = [loop.wait_for(result_is("error"), 60) for _ in range(2)]
        for line in broken:
            assert line["exit_code"] == 2 and "did you mean 'ubatch'" in line["error"], line
            assert line["serving"].startswith(f"{NAME} as last parsed at"), line
        assert identity() == before  # the last good deployment keeps serving, untouched

        profile.write_text(good)
        after = loop.wait_for(result_is("converged", "changed"), 60)
        if after["result"] != "converged":
            print("restored-profile pass:", after)
        # Seen once on this shared 2-core machine: a /health probe slower than its 3 s timeout makes a
        # pass wait for health again ("health read"); anything more would be a real change.
        assert after["result"] == "converged" or all(s.startswith("health ") for s in after["steps"]), loop.seen[-6:]
        assert identity() == before
        assert loop.stop(signal.SIGTERM) == 0
        assert loop.wait_for(result_is("stopped"), 10)["signal"] == "SIGTERM"
    finally:
        loop.close()
    stderr = (workdir / "reconcile.stderr").read_text()
    assert "Traceback" not in stderr, stderr[-3000:]


def test_once_is_one_pass_and_a_held_lock_skips_it_with_exit_5(workdir: Path) -> None:
    kimik3(workdir, "apply", "profile.yaml")  # converged, whatever ran before (a no-op when it already is)
    once = kimik3(workdir, "reconcile", "--once", "profile.yaml")
    lines = [json.loads(raw) for raw in once.stdout.splitlines()]
    assert [line["result"] for line in lines] == ["converged"]
    started = time.monotonic()
    kimik3(workdir, "plan", "profile.yaml")
    print(
        f"converged host: reconcile --once pass {lines[0]['duration_s']} s; a whole `kimik3 plan` process "
        f"{time.monotonic() - started:.2f} s"
    )
    lock, holder = StateDirLock(workdir / "state"), new_holder("apply", NAME, SystemClock())
    assert lock.try_acquire(holder).acquired
    try:
        before = identity()
        skipped = kimik3(workdir, "reconcile", "--once", "profile.yaml", check=False)
        line = json.loads(skipped.stdout)
        assert skipped.returncode == 5 and (line["result"], line["holder"]) == ("locked", holder.id)
        assert identity() == before
        status = kimik3(workdir, "status", "profile.yaml").stdout  # read-only: runs while the host is locked
        assert f"lock       held: apply of {NAME} by pid {os.getpid()}" in status and holder.id in status
        assert (
            json.loads(kimik3(workdir, "status", "--json", "profile.yaml").stdout)["lock"]["holder"]["id"] == holder.id
        )
    finally:
        lock.release(holder)


def test_sigterm_during_a_pass_interrupts_it_releases_the_lock_and_exits_0(
    workdir: Path, background: Background
) -> None:
    docker("rm", "-f", NAME)  # ours: the next pass has a launch and a health wait to do
    record = workdir / "state" / "lock" / "holder.json"
    loop = Loop(background, workdir, "--interval", "1h", "profile.yaml")
    try:
        deadline = time.monotonic() + 60
        while not record.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert record.exists(), "the pass never took the lock"
        started = time.monotonic()
        assert loop.stop(signal.SIGTERM) == 0
        print(f"SIGTERM during a pass: exited in {time.monotonic() - started:.2f} s")
        stopped = loop.wait_for(lambda _: True, 10)
        assert (stopped["result"], stopped["interrupted_pass"]) == ("stopped", True), loop.seen
    finally:
        loop.close()
    assert not record.exists()  # released on the way out
    kimik3(workdir, "apply", "profile.yaml")  # the next run converges from what the pass left
    assert docker("inspect", "-f", "{{.State.Status}}", NAME) == "running"
