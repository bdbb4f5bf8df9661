"""Issue 15 on fakes: the pre-read executor, the load progress read from the server's /proc/<pid>/io, the
warm/cold verdict and the downtime prediction it feeds; the /proc parsers; the page-cache adapter on real files."""

from __future__ import annotations

from pathlib import Path

from support.fakes import FakeClock, FakeHost
from support.observed import model_fact, observed
from support.page_cache_reads import read_until

from kimik3_reconciler.adapters import page_cache
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.model.records import LOAD_RATE_KEY, WARM_LOAD_RATE_KEY
from kimik3_reconciler.model.specs import HealthWait, PagecachePreread
from kimik3_reconciler.observe.process_io import ProcessIo, parse_proc_io
from kimik3_reconciler.planning.health_step import predicted_load_s, reads_in_parallel
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.health import LoadWatch, wait_until_healthy
from kimik3_reconciler.steps.preread import preread_model

PROC_IO = "rchar: 5000\nwchar: 10\nsyscr: 7\nsyscw: 1\nread_bytes: 4096\nwrite_bytes: 0\ncancelled_write_bytes: 0\n"


class Recorder:
    def __init__(self) -> None:
        self.progress_calls: list[tuple[str, int, int, dict]] = []
        self.events: list[tuple[str, dict]] = []

    def progress(self, task: str, done: int, total: int, **fields: object) -> None:
        self.progress_calls.append((task, done, total, fields))

    def line(self, source: str, text: str) -> None:
        pass

    def event(self, name: str, **fields: object) -> None:
        self.events.append((name, fields))


def test_proc_io_parser() -> None:
    assert parse_proc_io(PROC_IO) == ProcessIo(rchar=5000, read_bytes=4096)
    assert parse_proc_io("") is None


def test_load_watch_rate_eta_and_warm_verdict() -> None:
    watch = LoadWatch(model_bytes=10_000)
    assert watch.sample(None, 0.0) == {}
    first = watch.sample(ProcessIo(rchar=1000, read_bytes=1000), 1.0)
    assert first == {"read_bytes": 1000, "rate_bps": 0}
    later = watch.sample(ProcessIo(rchar=5000, read_bytes=5000), 3.0)
    assert later == {"read_bytes": 5000, "rate_bps": 2000, "eta_s": 2.5}
    assert watch.warm(planned_warm=True) is False  # the block layer fetched it: cold, whatever was planned
    cached = LoadWatch(model_bytes=10_000)
    cached.sample(ProcessIo(rchar=10_100, read_bytes=0), 1.0)
    assert cached.warm(planned_warm=False) is True  # served by the page cache
    assert LoadWatch(10_000).warm(planned_warm=True) is True  # no counters: the plan's pre-read says


class _Docker:
    """One loading llama-server whose /proc/<pid>/io grows on each poll; /health flips after the 4th poll."""

    def __init__(self) -> None:
        self.polls = 0

    def inspect_container(self, name: str) -> dict:
        return {"State": {"Status": "running", "Pid": 4242}}

    def container_logs(self, name: str, tail: int) -> str:
        return "0.01.000.000 I llama_model_loader: loading model\n"


class _Http:
    def __init__(self, host: FakeHost) -> None:
        self.host, self.polls = host, 0

    def health(self, url: str) -> str:
        self.polls += 1
        read = min(self.polls * 3000, 12_000)
        self.host.proc[(4242, "io")] = f"rchar: {read}\nread_bytes: {read if self.polls < 99 else 0}\n"
        return "ok" if self.polls >= 4 else "loading"


def _ports(tmp_path: Path, host: FakeHost, docker: object, http: object):
    from support.fakes import MemoryState

    return Ports(docker=docker, hub=None, http=http, host=host, state=MemoryState(tmp_path), clock=FakeClock())


def test_health_wait_reports_the_servers_own_reads_and_records_the_rate(tmp_path: Path) -> None:
    host = FakeHost()
    ports = _ports(tmp_path, host, _Docker(), _Http(host))
    reporter = Recorder()
    wait_until_healthy(HealthWait("k3", "http://x/health", 600, model_bytes=12_000), ports, reporter)
    loads = [(done, total, f) for task, done, total, f in reporter.progress_calls if task == "loading k3"]
    assert [d for d, _, _ in loads] == [3000, 6000, 9000, 12_000] and {t for _, t, _ in loads} == {12_000}
    assert loads[1][2]["rate_bps"] > 0 and "eta_s" in loads[1][2] and loads[0][2]["phase"].startswith("llama_model")
    healthy = dict(reporter.events)["healthy"]
    assert healthy["cache"] == "cold" and healthy["read_bytes"] == 12_000
    assert ports.state.read(LOAD_RATE_KEY)["bytes"] == 12_000 and ports.state.read(WARM_LOAD_RATE_KEY) is None


def test_preread_executor_reads_every_file_and_reports_residency(tmp_path: Path) -> None:
    files = []
    for i in range(3):
        path = tmp_path / f"shard{i}.gguf"
        path.write_bytes(b"x" * 1000)
        files.append(str(path))
    host = FakeHost()
    ports = _ports(tmp_path, host, None, None)
    reporter = Recorder()
    preread_model(PagecachePreread(tuple(files), 3000, workers=2), ports, reporter)
    assert host.preread_calls == [(files, 2)]
    assert reporter.progress_calls[-1][1:3] == (3000, 3000)
    event = dict(reporter.events)["pre-read"]
    assert event["resident"] == "100.0 %" and event["files"] == 3
    assert "pre-read-short" not in dict(reporter.events)


def test_downtime_prediction_uses_the_warm_figure_after_a_preread() -> None:
    obs = observed(model=model_fact(shards=2, size=50 << 30)).model_copy(update={"load_rate": float(1 << 30)})
    cold, _ = predicted_load_s(obs)
    warm, how = predicted_load_s(obs, warm=True, mode="all-vram")
    assert cold == 100 and warm == 33 and "issue 15's warm/cold ratio" in how
    measured = obs.model_copy(update={"warm_load_rate": float(4 << 30)})
    assert predicted_load_s(measured, warm=True)[0] == 25
    # a hybrid server with the parallel-host-read patch copies its CPU experts on several threads (H200: 0.28x)
    hybrid, _ = predicted_load_s(obs, warm=True, mode="hybrid")
    patched, how = predicted_load_s(obs, warm=True, mode="hybrid", parallel_read=True)
    assert round(hybrid) == 55 and round(patched) == 30 and "hybrid, parallel-host-read" in how
    # all-VRAM has no host tensors for the patch to read: its own fraction, nothing said of the patch
    allvram, how = predicted_load_s(obs, warm=True, mode="all-vram", parallel_read=True)
    assert allvram == 33 and "parallel-host-read" not in how


def _profile(variant: str, build: str = "", serve: str = ""):
    gpus = "none" if variant == "cpu" else "all"
    text = (
        f"apiVersion: kimik3/v1\nname: k3\nmodel: {{repo: unsloth/Kimi-K3-GGUF, revision: {'0123456789abcdef' * 2 + '01234567'}, "
        f"quant: UD-Q2_K_XL}}\ngpus: {gpus}\nbuild: {{source: mainline, variant: {variant}{build}}}\n"
        f"serve: {{port: 8080{serve}}}\n"
    )
    return parse_profile(text, "p.yaml").profile


def test_the_server_reads_in_parallel_where_its_image_has_the_patch_and_serve_env_leaves_it_on() -> None:
    assert reads_in_parallel(_profile("cuda"))  # a CUDA default
    assert not reads_in_parallel(_profile("cpu"))  # CPU: opt-in
    assert reads_in_parallel(_profile("cpu", ", builtin_patches: [parallel-host-read]"))
    assert not reads_in_parallel(_profile("cuda", ", builtin_patches: [parallel-pin]"))
    assert not reads_in_parallel(_profile("cuda", serve=", env: {KIMIK3_PARALLEL_READ: '0'}"))


def test_page_cache_adapter_on_real_files(tmp_path: Path) -> None:
    """The real adapter: evict (DONTNEED), pre-read in parallel, mincore says every byte is resident (a page short
    at most; each try starts evicted, so a pre-read that misses pages cannot pass by adding up tries)."""
    path = tmp_path / "shard.gguf"
    path.write_bytes(b"\x01" * (3 * page_cache.CHUNK + 12345))  # an odd tail: the last chunk is a partial one
    size = path.stat().st_size
    seen: list[int] = []

    def read() -> None:
        page_cache.evict(str(path))
        seen.clear()
        page_cache.preread([str(path)], 3, seen.append)
        assert sum(seen) == size

    assert read_until(read, lambda: page_cache.resident_bytes(str(path)) >= size - 4096)
    page_cache.evict(str(path))
    assert page_cache.resident_bytes(str(path)) < path.stat().st_size // 2
