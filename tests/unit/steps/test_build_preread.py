"""Issue 15 item 2: the image build reads the model into the page cache while it compiles.

The executor on fakes that meet halfway (the build blocks until the pre-read runs, the pre-read until the build
runs: both see the other in progress, or the test waits out a timeout and fails); a pre-read failure never fails
the build, a build failure stops the pre-read; the pre-read step after it reads only what the cache lost. The
planner's decisions that the case files (103-106) do not show: no gain without a build or a serving server, the
quant gate, a saved plan whose build pre-read no longer fits."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import yaml
from support.fakes import FakeClock, FakeDocker, FakeHost, MemoryState
from support.payloads import BUILD_ARGS, local_build
from test_load_watch import Recorder
from test_plan_cases import CASES, build_case

from kimik3_reconciler.adapters import page_cache
from kimik3_reconciler.errors import BuildFailed
from kimik3_reconciler.model.plan import Action
from kimik3_reconciler.model.specs import ImageBuild, PagecachePreread
from kimik3_reconciler.planning import container_step, plan, preread_step, render_desired
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.image import build_image
from kimik3_reconciler.steps.preread import preread_model

WAIT_S = 5.0  # a rendezvous that times out means the two ran one after the other


class BuildingDocker(FakeDocker):
    """A docker build that waits (up to WAIT_S) for the pre-read to be reading before it finishes."""

    def __init__(self, preread_started: threading.Event, fail: bool = False):
        super().__init__()
        self.preread_started, self.fail = preread_started, fail
        self.build_started, self.build_done = threading.Event(), threading.Event()
        self.saw_preread: bool | None = None
        self.thread: str | None = None

    def build_image(self, spec: ImageBuild, context_files: dict[str, Path], on_line) -> str:
        self.thread = threading.current_thread().name
        self.build_started.set()
        self.saw_preread = self.preread_started.wait(WAIT_S)
        on_line("[ 50%] Building CUDA object ggml/src/ggml-cuda/fattn.cu.o")
        try:
            if self.fail:
                raise BuildFailed("image build failed: nvcc: out of memory")
            return super().build_image(spec, context_files, on_line)
        finally:
            self.build_done.set()


class ReadingHost(FakeHost):
    """A pre-read that waits (up to WAIT_S) for the build to be running, then reads as `behaviour` says."""

    def __init__(self, behaviour: str = "read"):
        super().__init__()
        self.behaviour = behaviour
        self.preread_started = threading.Event()
        self.docker: BuildingDocker | None = None
        self.saw_build: bool | None = None
        self.thread: str | None = None
        self.chunks = 0

    def preread(self, paths, workers, on_bytes, stop=None) -> None:
        assert self.docker is not None
        self.thread = threading.current_thread().name
        self.preread_started.set()
        self.saw_build = self.docker.build_started.wait(WAIT_S)
        if self.behaviour == "fail":
            raise OSError(5, "Input/output error", paths[0])
        if self.behaviour == "endless":  # reads until on_bytes says stop (raises), as the adapter's readers do
            for _ in range(int(WAIT_S / 0.001)):
                self.chunks += 1
                on_bytes(1)
                time.sleep(0.001)
            return
        if self.behaviour == "outlasts":  # still reading when the build is done
            self.docker.build_done.wait(WAIT_S)
            time.sleep(0.05)
        super().preread(paths, workers, on_bytes, stop)


def _world(tmp_path: Path, behaviour: str = "read", fail: bool = False):
    host = ReadingHost(behaviour)
    docker = BuildingDocker(host.preread_started, fail)
    host.docker = docker
    ports = Ports(
        docker=docker, hub=None, http=None, host=host, state=MemoryState(tmp_path / "state"), clock=FakeClock()
    )
    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    files = []
    for i in range(2):
        shard = tmp_path / f"k3-0000{i + 1}-of-00002.gguf"
        shard.write_bytes(b"w" * 1000)
        files.append(str(shard))
    preread = PagecachePreread(tuple(files), 2000, workers=2)
    spec = local_build(tmp_path, preread=preread)
    return ports, host, docker, spec, preread


def _no_preread_thread_left() -> bool:
    return not any(t.name == "kimik3-preread" for t in threading.enumerate())


def test_the_build_and_the_preread_run_at_the_same_time(tmp_path: Path) -> None:
    ports, host, docker, spec, preread = _world(tmp_path)
    reporter = Recorder()
    build_image(spec, ports, reporter)
    assert docker.saw_preread and host.saw_build  # each saw the other in progress: concurrent, not in turn
    assert docker.thread != host.thread and host.thread == "kimik3-preread"
    assert [s.tag for s in docker.builds] == ["kimi-k3-llamacpp:x"] and docker.builds[0].preread is None
    events = dict(reporter.events)
    assert events["pre-read-alongside"]["during"] == "the image build"
    assert events["pre-read"]["resident"] == "100.0 %" and events["pre-read"]["read_files"] == 2
    assert _no_preread_thread_left()  # joined before the build step returned
    # The pre-read step before the launch then finds every file resident and reads nothing.
    after = Recorder()
    preread_model(preread, ports, after)
    assert len(host.preread_calls) == 1 and "already resident" in dict(after.events)["pre-read"]["why"]


def test_a_failing_preread_does_not_fail_the_build(tmp_path: Path) -> None:
    ports, _, docker, spec, _ = _world(tmp_path, behaviour="fail")
    reporter = Recorder()
    build_image(spec, ports, reporter)  # no exception: a pre-read only warms
    assert docker.saw_preread and [s.tag for s in docker.builds] == ["kimi-k3-llamacpp:x"]
    failed = dict(reporter.events)["pre-read-failed"]
    assert "Input/output error" in failed["error"] and "the image build goes on" in failed["why"]
    assert _no_preread_thread_left()


def test_a_failing_build_stops_the_preread_and_fails(tmp_path: Path) -> None:
    ports, host, _, spec, _ = _world(tmp_path, behaviour="endless", fail=True)
    reporter = Recorder()
    with pytest.raises(BuildFailed, match="nvcc: out of memory"):
        build_image(spec, ports, reporter)
    assert _no_preread_thread_left() and host.chunks < int(WAIT_S / 0.001)  # stopped, not read to the end
    assert "pre-read-stopped" in dict(reporter.events) and "pre-read" not in dict(reporter.events)


def test_a_preread_that_outlasts_the_build_is_waited_for(tmp_path: Path) -> None:
    ports, _, _, spec, _ = _world(tmp_path, behaviour="outlasts")
    reporter = Recorder()
    build_image(spec, ports, reporter)
    names = [name for name, _ in reporter.events]
    assert names.index("pre-read-wait") < names.index("pre-read")  # the step returned after the pre-read ended
    assert _no_preread_thread_left()


def test_the_preread_step_reads_only_the_files_the_cache_lost(tmp_path: Path) -> None:
    host = FakeHost()
    ports = Ports(docker=None, hub=None, http=None, host=host, state=MemoryState(tmp_path), clock=FakeClock())
    files = []
    for i in range(3):
        shard = tmp_path / f"s{i}.gguf"
        shard.write_bytes(b"x" * 1000)
        files.append(str(shard))
    host.cached = {files[0], files[2]}
    host.page_cache[files[2]] = (995, 1000)  # a few pages evicted: counted as read (RESIDENT_SHARE)
    reporter = Recorder()
    preread_model(PagecachePreread(tuple(files), 3000), ports, reporter)
    assert host.preread_calls == [([files[1]], 4)]
    assert reporter.progress_calls[-1][1:3] == (1000, 1000)
    assert dict(reporter.events)["pre-read"]["read_files"] == 1


class UnknownSizeHost(FakeHost):
    """mincore's look cannot read one file (None: cached bytes and size unknown); reading it works."""

    def __init__(self, unknown: str):
        super().__init__()
        self.unknown = unknown

    def page_cache_bytes(self, path: str) -> tuple[int, int] | None:
        return None if path == self.unknown else super().page_cache_bytes(path)


def test_a_file_of_unknown_size_counts_its_listed_bytes(tmp_path: Path) -> None:
    """A file the residency look could not size counted 0 bytes in the progress total, so the progress ran past
    it (N1): the plan carries each file's listed size."""
    files = []
    for i in range(3):
        shard = tmp_path / f"u{i}.gguf"
        shard.write_bytes(b"y" * 1000 * (i + 1) ** 2)  # 1000, 4000, 9000
        files.append(str(shard))
    host = UnknownSizeHost(files[1])
    host.cached = {files[0]}
    ports = Ports(docker=None, hub=None, http=None, host=host, state=MemoryState(tmp_path), clock=FakeClock())
    reporter = Recorder()
    preread_model(PagecachePreread(tuple(files), 14000, sizes=(1000, 4000, 9000)), ports, reporter)
    assert host.preread_calls == [([files[1], files[2]], 4)]
    assert [(done, total) for _, done, total, _ in reporter.progress_calls] == [(4000, 13000), (13000, 13000)]
    # A plan saved before sizes were carried: the look's size where it has one, the model's mean file where not.
    host, reporter = UnknownSizeHost(files[1]), Recorder()
    host.cached = {files[0]}
    preread_model(
        PagecachePreread(tuple(files), 14000),
        Ports(docker=None, hub=None, http=None, host=host, state=MemoryState(tmp_path), clock=FakeClock()),
        reporter,
    )
    assert reporter.progress_calls[-1][2] == 14000 // 3 + 9000


def test_the_planned_preread_carries_each_files_size() -> None:
    steps = _plan(f"""
desired: {{build: {{commit: "1111111111111111111111111111111111111111"}}}}
previous: {{build: {{commit: "2222222222222222222222222222222222222222"}}}}
observed: {{container: {{state: exited, exit_code: 0}}, host: {RAM}}}
""")
    for spec in (steps["image"].spec.preread, steps["preread"].spec):
        assert len(spec.sizes) == len(spec.files) and sum(spec.sizes) == spec.total_bytes > 0


def test_the_adapter_stops_reading_when_told(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real adapter: `on_bytes` raising (the build failed) drops the queued chunks instead of reading on
    (Executor.map cancels them when its iterator raises)."""
    monkeypatch.setattr(page_cache, "CHUNK", 64 << 10)
    path = tmp_path / "shard.gguf"
    path.write_bytes(b"\x02" * (256 * page_cache.CHUNK))
    calls = []

    def on_bytes(n: int) -> None:
        calls.append(n)
        time.sleep(0.01)  # a chunk takes its time, as a 16 MiB read from disk does
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        page_cache.preread([str(path)], 2, on_bytes)
    assert len(calls) < 64  # far from the 256 chunks the file has


class SlowReads:
    """os.preadv that takes its time (as a 16 MiB read from disk does) and counts the reads."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, seconds: float = 0.002):
        self.count, self.real, self.seconds = 0, os.preadv, seconds
        monkeypatch.setattr(page_cache.os, "preadv", self)

    def __call__(self, fd, buffers, offset):
        self.count += 1
        time.sleep(self.seconds)
        return self.real(fd, buffers, offset)


class PagecacheHost(FakeHost):
    """The real adapter's pre-read (page_cache.preread) behind a fake host."""

    def preread(self, paths, workers, on_bytes, stop=None) -> None:
        page_cache.preread(paths, workers, on_bytes, stop=stop)


def _reader_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("kimik3-preread")]


def test_an_interrupt_while_waiting_for_the_preread_stops_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The build is done, the pre-read reads on (`pre-read-wait`), Ctrl-C (or reconcile's SIGTERM) lands in the
    wait: the step raises at once and the readers stop after the chunks they hold, as no step outlives its call
    (before: the join was left, the pool's queue of every chunk was run to its end at interpreter exit)."""
    monkeypatch.setattr(page_cache, "CHUNK", 4 << 10)
    shard = tmp_path / "k3.gguf"
    shard.write_bytes(b"\x03" * (8000 * page_cache.CHUNK))  # 8000 chunks: ~8 s of slow reads with 2 workers
    reads = SlowReads(monkeypatch)
    ports = Ports(
        docker=FakeDocker(),
        hub=None,
        http=None,
        host=PagecacheHost(),
        state=MemoryState(tmp_path / "st"),
        clock=FakeClock(),
    )
    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    preread = PagecachePreread((str(shard),), shard.stat().st_size, workers=2)
    spec = local_build(tmp_path, BUILD_ARGS[:2], preread=preread)
    reporter, sent = Recorder(), {}
    main = threading.main_thread().ident

    def interrupt_the_wait() -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and ("pre-read-wait" not in dict(reporter.events) or reads.count < 20):
            time.sleep(0.005)
        sent["reads"], sent["at"] = reads.count, time.monotonic()
        signal.pthread_kill(main, signal.SIGINT)  # a real signal: it interrupts the blocked join, as Ctrl-C does

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt_the_wait, name="test-interrupter", daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            build_image(spec, ports, reporter)
        returned = time.monotonic()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert returned - sent["at"] < 2.0  # promptly, not after the rest of the 8000 chunks
    assert not _reader_threads()  # the pre-read thread and its readers are gone when the step raises
    read_then = reads.count
    time.sleep(0.1)
    assert reads.count == read_then  # nothing reads on after the step raised
    assert 20 <= sent["reads"] and reads.count - sent["reads"] <= preread.workers  # only the chunks the readers held
    events = dict(reporter.events)
    assert "pre-read" not in events and "interrupted" in events["pre-read-stopped"]["why"]


def test_the_adapter_stops_before_reading_once_stop_is_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """page_cache.preread stops by itself: each reader checks the flag before its read, and chunks are handed out
    a few at a time, never the whole model queued up front (a pool's queue is run to its end at interpreter
    exit)."""
    monkeypatch.setattr(page_cache, "CHUNK", 4 << 10)
    path = tmp_path / "shard.gguf"
    path.write_bytes(b"\x04" * (1000 * page_cache.CHUNK))
    reads, drawn, stop = SlowReads(monkeypatch, 0.001), [0], threading.Event()
    chunks = page_cache._chunks

    def counted(paths, limit=None):
        for chunk in chunks(paths, limit):
            drawn[0] += 1
            yield chunk

    monkeypatch.setattr(page_cache, "_chunks", counted)
    seen = {}

    def on_bytes(n: int) -> None:
        if reads.count >= 30 and not stop.is_set():
            seen["reads"], seen["drawn"] = reads.count, drawn[0]
            stop.set()

    page_cache.preread([str(path)], 3, on_bytes, stop=stop)  # returns, no error: the caller asked for the stop
    assert reads.count - seen["reads"] <= 3  # the chunks the 3 readers held
    assert seen["drawn"] - seen["reads"] <= 3 * page_cache.AHEAD_PER_WORKER + 3  # a window ahead, not 1000 chunks
    assert drawn[0] < 100 and not _reader_threads()


# --- the planner ------------------------------------------------------------------------------------------

RAM = {"physical_cores": 8, "ram_total": 274877906944, "ram_available": 214748364800}


def _plan(case: str):
    profile, observed = build_case(yaml.safe_load(case))
    return {s.kind: s for s in plan(profile, observed).steps}


def test_no_build_and_no_server_serving_is_no_gain() -> None:
    steps = _plan(f"""
observed: {{container: {{state: exited, exit_code: 137}}, host: {RAM}}}
""")
    assert steps["container"].action is Action.UPDATE  # started again, same image: nothing built
    assert steps["preread"].action is Action.NOOP
    assert (
        "no pre-read: no image build runs first, and kimi-k3 is exited: a read before the launch would only "
        "move the load's read in front of it"
    ) in steps["preread"].reason
    assert "pre-read" not in steps["health"].cost


def test_a_stopped_server_with_a_rebuild_prereads_during_the_build() -> None:
    steps = _plan(f"""
desired: {{build: {{commit: "1111111111111111111111111111111111111111"}}}}
previous: {{build: {{commit: "2222222222222222222222222222222222222222"}}}}
observed: {{container: {{state: exited, exit_code: 0}}, host: {RAM}}}
""")
    assert steps["image"].spec.preread is not None and "the build pre-reads 80.9 GiB" in steps["image"].reason
    # Not "no extra time": a read that outlasts the compile is waited for (`pre-read-wait`).
    assert steps["image"].cost.endswith("; the pre-read overlaps the compile, the step waits for the rest of it")
    assert steps["image"].to_json()["spec"]["preread"]["total_bytes"] == steps["preread"].spec.total_bytes  # --json
    assert steps["preread"].action is Action.READ and "before the launch" in steps["preread"].reason
    assert "(pre-read: " in steps["health"].cost  # the first load is predicted warm


def test_no_preread_during_the_build_when_the_quant_gate_runs_between() -> None:
    profile, observed = build_case(
        yaml.safe_load(f"""
desired: {{build: {{commit: "1111111111111111111111111111111111111111"}}, gate: {{quant: {{reference_quant: Q8_0}}}},
          model: {{quant: IQ1_S}}}}
previous: {{build: {{commit: "2222222222222222222222222222222222222222"}}, model: {{quant: IQ1_S}},
           gate: {{quant: {{reference_quant: Q8_0}}}}}}
observed: {{host: {RAM}}}
""")
    )
    observed = observed.model_copy(update={"reference": observed.model})  # the reference quant is cached too
    steps = {s.kind: s for s in plan(profile, observed).steps}
    assert steps["gate"].action is Action.READ and steps["image"].spec.preread is None
    assert steps["preread"].action is Action.NOOP and "the quant gate stops kimi-k3 first" in steps["preread"].reason


def test_a_build_without_memory_for_the_preread_carries_none() -> None:
    steps = _plan("""
desired: {build: {commit: "1111111111111111111111111111111111111111"}, serve: {ubatch: 2048}}
previous: {build: {commit: "2222222222222222222222222222222222222222"}}
observed: {host: {physical_cores: 8, ram_total: 137438953472, ram_available: 107374182400},
           container: {state: running, health: ok}}
""")
    assert steps["image"].spec.preread is None and "pre-reads" not in steps["image"].reason
    assert steps["preread"].action is Action.READ and "not during the image build" in steps["preread"].reason


def test_the_planners_plan_the_container_alone_once_and_decide_the_overlap_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The image planner (and its `build_overlap`) and `plan_preread` ask the same questions of one plan: the
    container's steps planned alone and whether the build pre-reads are computed once per plan, kept on that
    plan's Desired (no module state: a second plan computes its own)."""
    calls: list[str] = []
    real_container, real_overlap = container_step.plan_container, preread_step._build_overlap

    def container(desired, observed):
        calls.append("container")
        return real_container(desired, observed)

    def overlap(desired, observed):
        calls.append("overlap")
        return real_overlap(desired, observed)

    monkeypatch.setattr(container_step, "plan_container", container)  # what container_alone asks
    monkeypatch.setattr(preread_step, "_build_overlap", overlap)
    for _ in range(2):
        steps = _plan(f"""
desired: {{build: {{commit: "1111111111111111111111111111111111111111"}}, serve: {{ubatch: 2048}}}}
previous: {{build: {{commit: "2222222222222222222222222222222222222222"}}}}
observed: {{container: {{state: running, health: ok, pid: 4242, rss_gib: 30}}, host: {RAM}}}
""")
        assert steps["image"].spec.preread is not None and steps["preread"].action is Action.READ
    assert calls == ["container", "overlap"] * 2


def test_a_desireds_answer_is_kept_per_observation_and_is_not_part_of_its_value() -> None:
    case = yaml.safe_load((CASES / "103-preread-during-build.yaml").read_text())
    profile, observed = build_case(case)
    desired, twin = render_desired(profile, observed), render_desired(profile, observed)
    asked: list[int] = []

    def compute(value: int):
        return lambda: asked.append(value) or value

    assert desired.answer("q", observed, compute(1)) == 1
    assert desired.answer("q", observed, compute(2)) == 1  # the same observation: answered already
    other = observed.model_copy(update={"container": None})
    assert desired.answer("q", other, compute(3)) == 3  # another observation: asked afresh
    assert asked == [1, 3]
    assert desired == twin  # the answers are no part of the value
    assert "_answers" not in repr(desired)
