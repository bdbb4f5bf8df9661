"""A scrape never hangs (issue 30 item 2): each source the exporter's collector waits on (docker, the server's
/health, /metrics and /slots, the state dir, /proc, NVML, the page-cache walk) is made to hang on fakes, one at a
time. The scrape answers within its bound, that source reads 0 in kimik3_exporter_source_up and its series are
left out (no last value), every other source answers; while it still hangs the next scrape does not wait on it
again nor start a second read of it; released, it is back at the next scrape. The deadlines are shrunk (the
production table is in exporter/sources.py) so the test waits tenths of a second, not seconds."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry
from support.fakes import FAKE_REVISION, FakeHub, fake_ports
from support.fakes.docker import container_inspect

from kimik3_reconciler.exporter.collect import DeploymentCollector
from kimik3_reconciler.exporter.sources import SOURCE_DEADLINE_S, SourceReads
from kimik3_reconciler.model.labels import CONTAINER_FINGERPRINT
from kimik3_reconciler.model.metrics import ExporterConfig
from kimik3_reconciler.model.records import apply_key
from kimik3_reconciler.model.specs import ContainerSpec

DEADLINE_S, BOUND_S = 0.5, 1.5
SLACK_S = 1.0  # a loaded 2-core CI box (and structlog's first import, ~0.3 s there); a missing bound hangs 30 s
SERVER = "http://127.0.0.1:18999"
SERVER_METRICS = "# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total 40\n"


class Hang:
    """Wraps a port method: while `held`, each call blocks until released; counts the calls."""

    def __init__(self, real: Callable[..., Any]):
        self.real, self.calls = real, 0
        self.release = threading.Event()
        self.held = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.held:
            self.release.wait(30)
        return self.real(*args, **kwargs)

    def let_go(self) -> None:
        self.held = False
        self.release.set()


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[tuple[DeploymentCollector, Any]]:
    ports, docker = fake_ports(FakeHub("org/k3", FAKE_REVISION, {}, tmp_path / "hub"))
    shard = tmp_path / "k3-00001-of-00001.gguf"
    shard.write_bytes(b"gguf" * 64)
    ports.host.page_cache[str(shard)] = (128, 256)
    spec = ContainerSpec(
        name="k3-test",
        image="kimik3/llama:x",
        command=("--port", "18999"),
        env=(),
        mounts=(),
        gpus=("0",),
        labels=((CONTAINER_FINGERPRINT, "fp1"),),
    )
    docker.containers["k3-test"] = container_inspect(spec, "c" * 64, "sha256:i")
    docker.containers["k3-test"]["State"]["Pid"] = 777
    ports.host.rss[777] = 5 << 30
    ports.host.nvml_dump = {
        "driver": "580",
        "gpus": [
            {
                "index": 0,
                "uuid": "GPU-a",
                "memory_total": 100,
                "memory_free": 40,
                "processes": [{"pid": 777, "used_memory": 60}],
            }
        ],
    }
    ports.http.loading_polls = 0
    ports.http.pages.update({f"{SERVER}/metrics": (200, SERVER_METRICS), f"{SERVER}/slots": (200, "[]")})
    ports.state.write(apply_key("k3-test"), {"result": "ok", "fingerprint": "fp1", "date": "2026-01-01T00:00:00+00:00"})
    config = ExporterConfig(
        profile="k3-test",
        labels={"profile": "k3-test", "fingerprint": "fp1"},
        bind="127.0.0.1",
        port=1,
        container="k3-test",
        server_url=SERVER,
        shards=(str(shard),),
        gpus=("0",),
    )
    reads = SourceReads({source: DEADLINE_S for source in SOURCE_DEADLINE_S}, bound_s=BOUND_S)
    yield DeploymentCollector(config, ports, reads), ports


def scrape(collector: DeploymentCollector) -> tuple[dict[str, float], dict[str, float], float]:
    """(every sample by name, source_up by source, seconds the scrape took); kimik3_exporter_source_seconds by
    source is left in `collector.last_seconds`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    started = time.monotonic()
    text = generate_latest(registry).decode()
    took = time.monotonic() - started
    samples: dict[str, float] = {}
    up: dict[str, float] = {}
    seconds: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[sample.name] = sample.value
            if sample.name == "kimik3_exporter_source_up":
                up[sample.labels["source"]] = sample.value
            if sample.name == "kimik3_exporter_source_seconds":
                seconds[sample.labels["source"]] = sample.value
    collector.last_seconds = seconds  # type: ignore[attr-defined]
    return samples, up, took


# source -> (the port method that hangs, series that only this source gives)
HANGS: dict[str, tuple[Callable[[Any], tuple[object, str]], tuple[str, ...]]] = {
    "docker": (
        lambda p: (p.docker, "inspect_container"),
        (
            "kimik3_container_restarts",
            "kimik3_deployment_converged",
            "kimik3_server_rss_bytes",
            "kimik3_gpu_server_memory_bytes",
            "kimik3_gpu_foreign_memory_bytes",
        ),
    ),
    "server_health": (
        lambda p: (p.http, "health"),
        ("kimik3_server_up", "kimik3_server_loading", "kimik3_deployment_converged"),
    ),
    "state": (lambda p: (p.state, "read"), ("kimik3_last_apply_success", "kimik3_deployment_converged")),
    "proc": (lambda p: (p.host, "numa_balancing"), ("kimik3_numa_balancing", "kimik3_server_rss_bytes")),
    "nvml": (lambda p: (p.host, "nvml"), ("kimik3_gpu_memory_total_bytes", "kimik3_gpu_memory_used_bytes")),
    "page_cache": (lambda p: (p.host, "page_cache_bytes"), ("kimik3_shard_page_cache_bytes", "kimik3_shard_bytes")),
}


def test_every_source_answers_when_nothing_hangs(deployment):
    collector, _ = deployment
    samples, up, took = scrape(collector)
    assert set(up) == {
        "docker",
        "server_health",
        "server_metrics",
        "server_slots",
        "state",
        "proc",
        "nvml",
        "page_cache",
    } and set(up.values()) == {1.0}, up
    for _, only in HANGS.values():
        assert all(name in samples for name in only), [name for name in only if name not in samples]
    assert samples["kimik3_deployment_converged"] == 1.0 and samples["llamacpp:tokens_predicted_total"] == 40
    assert took < BOUND_S


@pytest.mark.parametrize("source", sorted(HANGS))
def test_a_hung_source_costs_one_deadline_and_only_its_own_series(deployment, source):
    collector, ports = deployment
    owner, name = HANGS[source][0](ports)
    hang = Hang(getattr(owner, name))
    setattr(owner, name, hang)
    try:
        samples, up, took = scrape(collector)
        print(f"{source} hung: scrape answered in {took:.3f} s (bound {BOUND_S} s)")
        assert took < BOUND_S + SLACK_S, took
        assert up[source] == 0.0 and all(v == 1.0 for s, v in up.items() if s != source), up
        assert not [n for n in HANGS[source][1] if n in samples], "a late source's series were served"
        assert samples["llamacpp:tokens_predicted_total"] == 40  # the server's own series never wait on another
        calls = hang.calls
        # Still hung: the next scrape reports it late without waiting a deadline for it again, nor a second read.
        samples, up, took = scrape(collector)
        print(f"{source} still hung: scrape answered in {took:.3f} s")
        assert up[source] == 0.0 and took < DEADLINE_S, took
        assert collector.last_seconds[source] >= DEADLINE_S  # the age of the one read still running
        assert hang.calls == calls
    finally:
        hang.let_go()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and scrape(collector)[1][source] != 1.0:
        time.sleep(0.05)
    samples, up, _ = scrape(collector)
    assert up[source] == 1.0 and all(n in samples for n in HANGS[source][1])


def test_server_metrics_hung_leaves_out_only_the_servers_series(deployment):
    collector, ports = deployment
    real = ports.http.get
    hang = Hang(real)
    ports.http.get = lambda url, **kw: hang(url, **kw) if url.endswith("/metrics") else real(url, **kw)
    try:
        samples, up, took = scrape(collector)
    finally:
        hang.let_go()
    assert took < BOUND_S + SLACK_S and up["server_metrics"] == 0.0 and up["server_slots"] == 1.0
    assert "llamacpp:tokens_predicted_total" not in samples and samples["kimik3_server_up"] == 1.0


def test_two_scrapes_at_once_share_one_read_of_each_source(deployment):
    collector, ports = deployment
    slow = Hang(ports.docker.inspect_container)
    ports.docker.inspect_container = slow
    results: list[dict[str, float]] = []
    threads = [threading.Thread(target=lambda: results.append(scrape(collector)[1])) for _ in range(2)]
    for thread in threads:
        thread.start()
    time.sleep(0.1)  # both scrapes are waiting on the one inspect
    slow.let_go()
    for thread in threads:
        thread.join(5)
    assert slow.calls == 1 and [r["docker"] for r in results] == [1.0, 1.0]


def test_a_slow_page_cache_walk_is_served_by_the_next_scrape(deployment):
    """mincore over 800 GB can outlast its deadline: that scrape shows no page cache; the walk's result, when it
    ends, is served by the following scrapes (it is at most two periods old), and no second walk starts meanwhile."""
    collector, ports = deployment
    hang = Hang(ports.host.page_cache_bytes)
    ports.host.page_cache_bytes = hang
    samples, up, _ = scrape(collector)
    assert up["page_cache"] == 0.0 and "kimik3_shard_page_cache_bytes" not in samples
    hang.let_go()
    time.sleep(0.05)
    samples, up, _ = scrape(collector)
    assert up["page_cache"] == 1.0 and samples["kimik3_shard_page_cache_bytes"] == 128 and hang.calls == 1


def test_while_loading_the_load_phase_comes_from_docker_and_the_servers_pages_are_not_asked_for(deployment):
    """/health 503: every route of a loading llama-server answers 503 for minutes; its pages are not a source
    down (no alert for the length of a load). The phase line needs Docker's log: without Docker, no phase."""
    collector, ports = deployment
    ports.http.loading_polls = 10
    ports.docker.logs = "load_tensors: loading model tensors, this can take a while"
    samples, up, _ = scrape(collector)
    assert samples["kimik3_server_loading"] == 1.0 and samples["kimik3_server_up"] == 0.0
    assert "server_metrics" not in up and "server_slots" not in up and "llamacpp:tokens_predicted_total" not in samples
    assert samples["kimik3_load_phase"] == 1.0
    hang = Hang(ports.docker.inspect_container)
    ports.docker.inspect_container = hang
    try:
        samples, up, _ = scrape(collector)
    finally:
        hang.let_go()
    assert up["docker"] == 0.0 and samples["kimik3_server_loading"] == 1.0 and "kimik3_load_phase" not in samples


def test_a_server_answering_while_docker_says_ours_is_stopped_is_not_ours(deployment):
    """Docker answered and our container is not running: what answers at the server URL (a conflicting profile's
    server on the same port) is not reported as ours. Docker silent: the server's word is taken."""
    collector, ports = deployment
    ports.docker.containers["k3-test"]["State"]["Status"] = "exited"
    ports.http.health = lambda url: "ok"  # someone answers at the URL
    samples, up, _ = scrape(collector)
    assert samples["kimik3_server_up"] == 0.0 and "llamacpp:tokens_predicted_total" not in samples
    assert samples["kimik3_deployment_converged"] == 0.0 and up["docker"] == 1.0
