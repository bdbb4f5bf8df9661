"""The metrics exporter on fakes: converged by the orchestrator like the container (started, kept, replaced,
stopped by destroy), and one scrape's exposition read back through prometheus_client's own parser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support.fakes import FAKE_PROFILE, FAKE_REVISION, FakeHub, FakeProcesses, fake_ports

from kimik3_reconciler.errors import TransientError
from kimik3_reconciler.exporter.proxy_observe import ProxyMetrics
from kimik3_reconciler.exporter.registry import deployment_registry, exposition
from kimik3_reconciler.exporter.watch import samples_of, watch_rows
from kimik3_reconciler.model.metrics import ExporterConfig
from kimik3_reconciler.model.plan import Action
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.model.records import exporter_config_key, exporter_key, verify_key
from kimik3_reconciler.orchestrator import Orchestrator
from kimik3_reconciler.steps.report import NullReporter

FILES = {"UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00001.gguf": b"shard" * 10}
SECRET = "sk-kimik3-demo-key-0123456789"
SERVER_METRICS = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 12
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 36
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
"""
SLOTS = json.dumps(
    [
        {"id": 0, "n_ctx": 2048, "is_processing": True, "n_prompt_tokens": 30, "next_token": [{"n_decoded": 5}]},
        {"id": 1, "n_ctx": 2048, "is_processing": False},
    ]
)


@pytest.fixture
def world(tmp_path: Path):
    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    (tmp_path / "api.key").write_text(SECRET + "\n")
    ports, docker = fake_ports(FakeHub("org/k3", FAKE_REVISION, FILES, tmp_path / "hub"))
    ports.processes = FakeProcesses(ports.state, ports.http)
    return Orchestrator(ports, NullReporter(), tmp_path, tmp_path / "Dockerfile.llamacpp"), docker


def with_metrics(extra: str = "") -> str:
    return (
        FAKE_PROFILE.replace("serve: {port: 18999,", "serve: {api_key_file: api.key, port: 18999,")
        + f"metrics: {{port: 19201{extra}}}\n"
    )


def scrape(orchestrator: Orchestrator) -> dict[str, list]:
    config = ExporterConfig.from_json(orchestrator.ports.state.read(exporter_config_key("k3-test")))
    text = generate_latest(deployment_registry(config, orchestrator.ports)).decode()
    assert SECRET not in text
    families: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            families.setdefault(sample.name, []).append(sample)
    return families


def test_apply_starts_the_exporter_keeps_it_replaces_it_and_destroy_stops_it(world):
    orchestrator, _ = world
    first = orchestrator.apply(parse_profile(with_metrics(), "p.yaml"))
    assert [(s.kind, s.action) for s in first.executed][-1] == ("metrics", Action.CREATE)
    record = orchestrator.ports.state.read(exporter_key("k3-test"))
    processes = orchestrator.ports.processes
    assert processes.cmdline(record["pid"])[-2:] == ("metrics-serve", "k3-test")
    # Converged: the exporter answers its fingerprint, nothing to do.
    assert orchestrator.plan(parse_profile(with_metrics(), "p.yaml")).converged
    # Another bind is another exporter: replaced (the old pid stopped), the container untouched.
    moved = orchestrator.apply(parse_profile(with_metrics(", bind: 0.0.0.0"), "p.yaml"))
    assert [(s.kind, s.action) for s in moved.executed] == [("metrics", Action.REPLACE)]
    assert record["pid"] not in processes.running
    teardown = orchestrator.destroy(parse_profile(with_metrics(", bind: 0.0.0.0"), "p.yaml"), images=False, model=False)
    assert ("metrics", Action.DELETE) in [(s.kind, s.action) for s in teardown.steps]
    assert processes.running == {} and orchestrator.ports.state.read(exporter_key("k3-test")) is None


def test_an_exporter_that_never_answers_fails_the_step_and_is_stopped(world):
    orchestrator, _ = world
    orchestrator.ports.processes.answer = False
    with pytest.raises(Exception, match="did not answer"):
        orchestrator.apply(parse_profile(with_metrics(), "p.yaml"))
    assert orchestrator.ports.processes.running == {}


def test_one_scrape_tells_state_server_and_host_without_the_key(world):
    orchestrator, docker = world
    orchestrator.apply_or_revert(parse_profile(with_metrics(), "p.yaml"))  # writes the apply record
    orchestrator.ports.state.write(
        verify_key("k3-test"),
        {
            "checks": [{"name": "text", "status": "not checkable"}],
            "tool_call_parse_failures": 2,
            "tool_call_retries": 1,
            "date": "2026-01-01T00:00:00+00:00",
        },
    )
    base = "http://127.0.0.1:18999"
    orchestrator.ports.http.pages.update({f"{base}/metrics": (200, SERVER_METRICS), f"{base}/slots": (200, SLOTS)})
    docker.containers["k3-test"]["State"]["Pid"] = 777
    orchestrator.ports.host.rss[777] = 5 << 30
    families = scrape(orchestrator)
    labels = families["kimik3_deployment_converged"][0].labels
    assert set(labels) == {"profile", "quant", "build", "fingerprint"} and labels["quant"] == "UD-Q2_K_XL"
    assert families["kimik3_deployment_converged"][0].value == 1.0
    assert families["kimik3_last_apply_success"][0].value == 1.0
    assert families["kimik3_model_load_seconds"][0].value > 0
    assert families["kimik3_server_rss_bytes"][0].value == 5 << 30
    assert families["kimik3_verify_tool_call_parse_failures"][0].value == 2
    tokens = families["llamacpp:prompt_tokens_total"][0]
    assert tokens.value == 12 and tokens.labels == labels
    # the prefix cache under engine-neutral names: llama-server's cached tokens of cached + evaluated ones
    assert families["kimik3_prefix_cache_hit_tokens_total"][0].value == 36
    assert families["kimik3_prefix_cache_prompt_tokens_total"][0].value == 48
    assert families["kimik3_prefix_cache_prompt_tokens_total"][0].labels == labels
    slots = {s.labels["slot"]: s.value for s in families["kimik3_slot_kv_tokens"]}
    assert slots == {"0": 35.0}
    assert "kimik3_gpu_memory_total_bytes" not in families  # gpus: none: no GPU series, not zeros
    # The key was used to read the server (a keyed /metrics), and appears nowhere in the exposition (scrape()).
    assert SECRET in orchestrator.ports.http.keys_sent


@pytest.mark.parametrize("content", [b"\xff\xfe not utf-8\n", ("sk-" + "a" * 8 + "\r\n").encode(), "clé\n".encode()])
def test_a_key_file_edited_after_the_apply_into_one_no_header_carries_is_not_sent(world, tmp_path, content):
    """The key file changed under a running exporter (non-UTF-8, CRLF, non-ASCII): the scrape still answers and
    sends no key (the server's 401 shows as its source down), never a client error for the whole /metrics."""
    orchestrator, _ = world
    orchestrator.apply_or_revert(parse_profile(with_metrics(), "p.yaml"))
    base = "http://127.0.0.1:18999"
    orchestrator.ports.http.pages.update({f"{base}/metrics": (200, SERVER_METRICS), f"{base}/slots": (200, SLOTS)})
    (tmp_path / "api.key").write_bytes(content)
    orchestrator.ports.http.keys_sent.clear()
    families = scrape(orchestrator)
    assert families["kimik3_deployment_converged"][0].value == 1.0
    assert all(key is None for key in orchestrator.ports.http.keys_sent), orchestrator.ports.http.keys_sent


def test_a_scrape_while_dockerd_is_gone_answers_with_docker_down(world, monkeypatch):
    """dockerd restarting (or absent, as on the H200 proof host): the scrape still answers; docker's source is 0, what
    only Docker knows (converged, the restart count, the server's pid and so its RSS) is left out rather than 0, and
    the server's own health and series, read from the server, stay (issue 30: they were dropped)."""
    orchestrator, docker = world
    orchestrator.apply_or_revert(parse_profile(with_metrics(), "p.yaml"))
    base = "http://127.0.0.1:18999"
    orchestrator.ports.http.pages.update({f"{base}/metrics": (200, SERVER_METRICS), f"{base}/slots": (200, SLOTS)})
    docker.containers["k3-test"]["State"]["Pid"] = 777
    orchestrator.ports.host.rss[777] = 5 << 30
    assert "kimik3_server_rss_bytes" in scrape(orchestrator)

    def gone(name):
        raise TransientError("Docker daemon not answering (/var/run/docker.sock): connection refused")

    monkeypatch.setattr(docker, "inspect_container", gone)
    families = scrape(orchestrator)
    up = {s.labels["source"]: s.value for s in families["kimik3_exporter_source_up"]}
    assert up["docker"] == 0.0 and up["server_health"] == up["server_metrics"] == up["state"] == 1.0
    assert "kimik3_deployment_converged" not in families and "kimik3_container_restarts" not in families
    assert "kimik3_server_rss_bytes" not in families  # whose pid is the server's is Docker's answer
    assert families["kimik3_server_up"][0].value == 1.0  # the fake server answers /health 200 all along
    assert families["llamacpp:prompt_tokens_total"][0].value == 12
    assert families["kimik3_last_apply_success"][0].value == 1.0  # the record is read without Docker


def test_gpu_series_are_the_profiles_gpus_with_the_servers_share_and_foreign_holders(world):
    orchestrator, _ = world
    config = ExporterConfig(
        profile="k3-test",
        labels={"profile": "k3-test"},
        bind="127.0.0.1",
        port=1,
        container="k3-test",
        server_url="http://127.0.0.1:1",
        gpus=("1",),
    )
    orchestrator.ports.host.nvml_dump = {
        "driver": "580",
        "gpus": [
            {"index": 0, "uuid": "GPU-a", "memory_total": 100, "memory_free": 100, "processes": []},
            {
                "index": 1,
                "uuid": "GPU-b",
                "memory_total": 100,
                "memory_free": 30,
                "processes": [{"pid": 777, "used_memory": 50}, {"pid": 999, "used_memory": 20}],
            },
        ],
    }
    text = generate_latest(deployment_registry(config, orchestrator.ports)).decode()
    got = {(s.name, s.labels.get("gpu")): s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert ("kimik3_gpu_memory_total_bytes", "0") not in got
    assert got[("kimik3_gpu_memory_used_bytes", "1")] == 70
    assert got[("kimik3_gpu_foreign_memory_bytes", "1")] == 70  # no container runs: every holder is foreign
    assert got[("kimik3_gpu_foreign_processes", "1")] == 2
    orchestrator.ports.host.nvml_dump = {"error": "NVMLError_LibraryNotFound"}
    text = generate_latest(deployment_registry(config, orchestrator.ports)).decode()
    assert "kimik3_gpu_" not in text and 'kimik3_exporter_source_up{profile="k3-test",source="nvml"} 0.0' in text


def test_the_watch_view_reads_the_same_numbers_with_rates_and_percentiles(world):
    orchestrator, docker = world
    orchestrator.apply_or_revert(parse_profile(with_metrics(), "p.yaml"))
    base = "http://127.0.0.1:18999"
    orchestrator.ports.http.pages.update({f"{base}/metrics": (200, SERVER_METRICS), f"{base}/slots": (200, SLOTS)})
    config = ExporterConfig.from_json(orchestrator.ports.state.read(exporter_config_key("k3-test")))
    registry = deployment_registry(config, orchestrator.ports)
    before = samples_of(exposition(registry))
    orchestrator.ports.http.pages[f"{base}/metrics"] = (
        200,
        SERVER_METRICS.replace(
            "llamacpp:requests_processing 1",
            "llamacpp:requests_processing 1\n# TYPE llamacpp:tokens_predicted_total "
            "counter\nllamacpp:tokens_predicted_total 40",
        ).replace("prompt_tokens_total 12", "prompt_tokens_total 32"),
    )
    now = samples_of(exposition(registry))
    metrics = ProxyMetrics(registry, config.labels)
    for seconds in (0.1, 0.2, 0.3, 0.4):
        metrics.ttft.labels(**config.labels, route="/v1/chat/completions", model="m").observe(seconds)
    rows = {(r.section, r.name): r.value for r in watch_rows(before, samples_of(exposition(registry)), 2.0)}
    assert rows[("deployment", "converged")] == "yes"
    assert rows[("server", "prompt tok/s")] == "10.0"  # (32 - 12) / 2 s
    assert ("server", "decode tok/s") not in rows  # no earlier reading of that counter: no rate
    assert rows[("server", "slots busy")] == "1 of 2"
    assert rows[("latency", "TTFT p50/p95")].startswith("250 / 475 ms")  # interpolated in buckets, as PromQL
    assert not any(r.section == "gpu" for r in watch_rows(before, now, 2.0))  # no NVML: no GPU rows


def test_status_watch_renders_without_an_exporter(world, monkeypatch, tmp_path):
    from click.testing import CliRunner

    import kimik3_reconciler.adapters as adapters
    from kimik3_reconciler import cli

    orchestrator, _ = world
    text = FAKE_PROFILE  # no metrics: section: the view collects in process
    orchestrator.apply_or_revert(parse_profile(text, "p.yaml"))
    (tmp_path / "profile.yaml").write_text(text)
    monkeypatch.setattr(adapters, "real_ports", lambda *a, **k: orchestrator.ports)
    result = CliRunner().invoke(
        cli.main,
        [
            "--dockerfile",
            str(tmp_path / "Dockerfile.llamacpp"),
            "status",
            "--watch",
            "--interval",
            "0.5s",
            "--iterations",
            "1",
            str(tmp_path / "profile.yaml"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "collected here" in result.output and "converged" in result.output and "yes" in result.output


def test_the_watch_view_says_what_the_last_apply_did_apart_from_the_revert_total(world):
    """Held-back review (issue 30): `status --watch` said "last apply: ok, 1 reverts" after an apply that did not
    revert; the 1 was the profile's running total. Now what the last apply did, then the total, labelled with the
    date it counts from (the counter's _created) and in the singular for one."""
    from kimik3_reconciler.errors import VerifyFailed
    from kimik3_reconciler.model.records import apply_key

    orchestrator, docker = world
    good = parse_profile(with_metrics(), "p.yaml")
    orchestrator.apply_or_revert(good)

    def last_apply() -> str:
        config = ExporterConfig.from_json(orchestrator.ports.state.read(exporter_config_key("k3-test")))
        rows = watch_rows({}, samples_of(exposition(deployment_registry(config, orchestrator.ports))), 1.0)
        return next(r.value for r in rows if r.name == "last apply")

    since = orchestrator.ports.state.read(apply_key("k3-test"))["reverts_since"]
    assert last_apply() == "ok, no revert; 0 reverts of this profile since 2026-01-01 00:00 UTC" and since

    def failing_check() -> None:
        raise VerifyFailed("verify failed (tool_call) for k3-test")

    with pytest.raises(VerifyFailed, match="reverted to the last good profile"):
        orchestrator.apply_or_revert(
            parse_profile(with_metrics().replace("parallel: 2", "parallel: 2, ubatch: 2048"), "p.yaml"), failing_check
        )
    assert (
        last_apply() == "FAILED, reverted to the last good profile; 1 revert of this profile since 2026-01-01 00:00 UTC"
    )
    orchestrator.apply_or_revert(good)  # converged: nothing to do, nothing reverted
    assert last_apply() == "ok, no revert; 1 revert of this profile since 2026-01-01 00:00 UTC"
    record = orchestrator.ports.state.read(apply_key("k3-test"))
    assert (record["reverted"], record["reverts"], record["reverts_since"]) == (False, 1, since)


def test_a_revert_total_an_older_kimik3_left_is_not_given_a_start_date(world):
    """A record without `reverts_since` but with a count: when that count started is not known, so the view says
    "in all" rather than a date it did not check (and no "no revert" for a record that does not say)."""
    from kimik3_reconciler.model.records import apply_key

    orchestrator, _ = world
    orchestrator.apply_or_revert(parse_profile(with_metrics(), "p.yaml"))
    record = orchestrator.ports.state.read(apply_key("k3-test"))
    orchestrator.ports.state.write(
        apply_key("k3-test"),
        {k: v for k, v in record.items() if k not in ("reverted", "reverts_since")} | {"reverts": 3},
    )
    config = ExporterConfig.from_json(orchestrator.ports.state.read(exporter_config_key("k3-test")))
    rows = watch_rows({}, samples_of(exposition(deployment_registry(config, orchestrator.ports))), 1.0)
    assert next(r.value for r in rows if r.name == "last apply") == "ok; 3 reverts of this profile in all"
    orchestrator.apply_or_revert(parse_profile(with_metrics(), "p.yaml"))
    assert orchestrator.ports.state.read(apply_key("k3-test"))["reverts_since"] is None  # still not known


def test_the_tool_call_failure_total_says_since_when_and_this_intervals_part():
    """The same class as the revert total: a bare "3" read as this interval's failures."""
    name = "kimik3_proxy_tool_call_parse_failures_total"
    rows = {
        r.name: r.value
        for r in watch_rows({name: [({}, 2.0)]}, {name: [({"kind": "parser"}, 2.0), ({"kind": "markup"}, 1.0)]}, 1.0)
    }
    assert rows["tool-call parse failures"] == "3 since the exporter started, 1 this interval"
    rows = {r.name: r.value for r in watch_rows({}, {name: [({}, 3.0)]}, 1.0)}
    assert rows["tool-call parse failures"] == "3 since the exporter started"


def test_the_watch_loop_reads_every_interval_and_rates_over_the_time_between_readings():
    """exporter/watch.readings (the `status --watch` loop, out of the CLI): the first rows at once, with no rate
    (one reading), then one reading per interval, the rate over the clock's time between two readings, and
    `iterations` refreshes after the first."""
    from kimik3_reconciler.exporter.watch import readings

    counter = "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total {}\n"
    expositions = iter(counter.format(n) for n in (10, 30, 90))
    moments = iter((100.0, 102.0, 105.0))
    slept: list[float] = []
    views = list(readings(lambda: next(expositions), 2.0, 2, clock=lambda: next(moments), sleep=slept.append))
    rates = [{r.name: r.value for r in rows if r.section == "server"}.get("prompt tok/s") for rows in views]
    assert rates == [None, "10.0", "20.0"]  # (30 - 10) / 2 s, then (90 - 30) / 3 s
    assert slept == [2.0, 2.0]


def test_the_apply_record_keeps_the_failures_whole_message(world):
    """Issue 38 item 7: the record kept the error's first line cut at 300 characters, so a gate refusal was kept as
    "the host gate refuses this profile:" without the port it named, and a long registry error lost its address."""
    from kimik3_reconciler.errors import VerifyFailed
    from kimik3_reconciler.model.records import apply_key

    orchestrator, _ = world
    message = (
        "the host gate refuses this profile:\n  serve.port 18999: held by another process (pid 4242, "
        "python3)\n" + "  registry " + "r" * 320 + ".example:5000 answered 502"
    )

    def failing_check() -> None:
        raise VerifyFailed(message)

    with pytest.raises(VerifyFailed):
        orchestrator.apply_or_revert(parse_profile(FAKE_PROFILE, "p.yaml"), failing_check)
    record = orchestrator.ports.state.read(apply_key("k3-test"))
    assert record["result"] == "failed" and record["error"] == message
