"""Issue 17 against the real parts: the demo converged with `metrics:` and its latency proxy on, a real
Prometheus (Debian's `prometheus`, started here on loopback with a scrape config written here) scraping the
exporter kimik3 started, and PromQL through Prometheus's HTTP API. The profile sets an API key: the exporter
needs it to read the server's /metrics, the proxy passes it, and it must appear in no series, label or
exposition. The demo's random weights cannot make a bad tool call on purpose: a second exporter
(`kimik3 metrics-serve`, its config written here) proxies a scripted server (support/sse_stub.py) that does."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from support.realparts import KIMIK3, applied, demo_profile, kimik3, write_profile
from support.sse_stub import SseStub

from kimik3_demo.hub import FixtureHub
from kimik3_reconciler.model.metrics import ExporterConfig
from kimik3_reconciler.model.records import exporter_config_key

pytestmark = pytest.mark.docker

NAME = "k3mx-metrics"
PORT, METRICS_PORT, PROM_PORT, SERVER_PORT = 19210, 19211, 19212, 19213
STUB, STUB_METRICS, STUB_PROXY, STUB_UPSTREAM = "k3mx-stub", 19214, 19215, 19216
API_KEY = "k3mx-secret-7c1e94d2"
PROM = f"http://127.0.0.1:{PROM_PORT}"
LABELS = f'profile="{NAME}"'


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory, hub: FixtureHub) -> Iterator[Path]:
    work = tmp_path_factory.mktemp("kimik3-metrics")
    profile = demo_profile(work, NAME, PORT, hub.url)
    profile["serve"]["api_key_file"] = "api.key"
    profile["metrics"] = {"port": METRICS_PORT, "proxy": True, "server_port": SERVER_PORT}
    (work / "api.key").write_text(f"{API_KEY}\n")
    write_profile(work, profile)
    with applied(work, NAME, "--no-verify-server"):
        yield work


@pytest.fixture(scope="module")
def stub_exporter(deployed: Path) -> Iterator[SseStub]:
    """A second exporter whose proxy fronts a scripted server (same code, started as apply starts one)."""
    config = ExporterConfig(
        profile=STUB,
        labels={"profile": STUB, "quant": "stub", "build": "stub", "fingerprint": "0"},
        bind="127.0.0.1",
        port=STUB_METRICS,
        container=f"{STUB}-absent",
        server_url=f"http://127.0.0.1:{STUB_UPSTREAM}",
        proxy_bind="127.0.0.1",
        proxy_port=STUB_PROXY,
    )
    path = deployed / "state" / exporter_config_key(STUB)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config.to_json()))
    env = {**os.environ, "KIMIK3_STATE_DIR": str(deployed / "state")}
    with SseStub(STUB_UPSTREAM, API_KEY) as upstream, open(deployed / "stub-exporter.log", "wb") as log:
        process = subprocess.Popen([*KIMIK3, "metrics-serve", STUB], env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: _answers(f"http://127.0.0.1:{STUB_METRICS}/healthz"), "the stub's exporter answers")
            yield upstream
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def prometheus(deployed: Path, stub_exporter: SseStub) -> Iterator[str]:
    if shutil.which("prometheus") is None:
        pytest.fail("no prometheus binary: scripts/test.sh installs Debian's package")
    config = deployed / "prometheus.yml"
    config.write_text(
        json.dumps(
            {  # YAML is a superset of JSON
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                "scrape_configs": [
                    {
                        "job_name": "kimik3",
                        "static_configs": [{"targets": [f"127.0.0.1:{METRICS_PORT}", f"127.0.0.1:{STUB_METRICS}"]}],
                    }
                ],
            }
        )
    )
    log = open(deployed / "prometheus.log", "wb")
    process = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={deployed / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{PROM_PORT}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(lambda: query('up{job="kimik3"}') == [1.0, 1.0], "prometheus scrapes both exporters (up == 1)")
        yield PROM
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        log.close()


def query(promql: str) -> list[float]:
    try:
        reply = httpx.get(f"{PROM}/api/v1/query", params={"query": promql}, timeout=5)
    except httpx.HTTPError:
        return []
    if reply.status_code == 503:  # Prometheus still starting ("Service Unavailable")
        return []
    answer = reply.json()
    assert answer["status"] == "success", answer
    return [float(r["value"][1]) for r in answer["data"]["result"]]


def wait_for(condition, what: str, timeout_s: float = 60.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting until {what}")


def test_promql_sees_the_converged_deployment(prometheus: str) -> None:
    assert query(f"kimik3_deployment_converged{{{LABELS}}}") == [1.0]
    assert query(f"kimik3_server_up{{{LABELS}}}") == [1.0]
    assert query(f"kimik3_last_apply_success{{{LABELS}}}") == [1.0]
    load = query(f"kimik3_model_load_seconds{{{LABELS}}}")
    assert len(load) == 1 and load[0] > 0
    assert query(f"kimik3_model_load_bytes{{{LABELS}}} > 0")
    assert query(f"kimik3_server_rss_bytes{{{LABELS}}} > 0")
    # The demo's two shards were just read by the load: in the page cache.
    assert len(query(f"kimik3_shard_page_cache_bytes{{{LABELS}}} > 0")) == 2
    # This CPU host has no NVML: no GPU series at all, not zeros.
    assert query(f"count(kimik3_gpu_memory_total_bytes{{{LABELS}}})") == []
    info = httpx.get(f"{PROM}/api/v1/query", params={"query": f"kimik3_deployment_info{{{LABELS}}}"}).json()
    metric = info["data"]["result"][0]["metric"]
    assert (
        metric["quant"] == "UD-Q2_K_XL" and metric["build"].startswith("mainline-") and len(metric["fingerprint"]) > 8
    )


def test_the_servers_token_counter_rises_after_a_completion(prometheus: str) -> None:
    series = f'llamacpp:tokens_predicted_total{{{LABELS},quant="UD-Q2_K_XL"}}'
    wait_for(lambda: len(query(series)) == 1, "the server's re-labelled counter is scraped")
    before = query(series)[0]
    reply = httpx.post(
        f"http://127.0.0.1:{PORT}/v1/chat/completions",
        timeout=120,
        headers={"Authorization": f"Bearer {API_KEY}"},
        json={"messages": [{"role": "user", "content": "count"}], "max_tokens": 8},
    )
    assert reply.status_code == 200
    wait_for(lambda: query(series)[0] > before, "tokens_predicted_total rises")


def test_the_proxy_passes_the_openai_client_and_prometheus_sees_its_latency(prometheus: str) -> None:
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{PORT}/v1", api_key=API_KEY, max_retries=0, timeout=120)
    stream = client.chat.completions.create(
        model=NAME, stream=True, max_tokens=8, messages=[{"role": "user", "content": "count to five"}]
    )
    events = [chunk for chunk in stream]
    # The chat parser may hold random tokens back (a possible start of markup) until the end: one event or more.
    assert events and events[-1].choices[0].finish_reason in ("length", "stop")
    # The raw completion route streams one event per token: the proxy passes them one by one.
    with httpx.stream(
        "POST",
        f"http://127.0.0.1:{PORT}/completion",
        timeout=120,
        headers={"Authorization": f"Bearer {API_KEY}"},
        json={"prompt": "count", "n_predict": 12, "stream": True, "ignore_eos": True},
    ) as raw:
        assert raw.headers["content-type"].startswith("text/event-stream")
        data = [line for line in raw.iter_lines() if line.startswith("data: ")]
    assert len(data) >= 3  # (random bytes that are not UTF-8 yet wait for the next token: not always 12)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"http://127.0.0.1:{PORT}/v1", api_key="wrong", max_retries=0).models.list()
    assert httpx.get(f"http://127.0.0.1:{PORT}/health", timeout=5).json() == {"status": "ok"}
    chat, raw_route = f'{LABELS},route="/v1/chat/completions"', f'{LABELS},route="/completion"'
    gaps = len([d for d in data if d != "data: [DONE]"]) - 1
    wait_for(lambda: bool(query(f"sum(kimik3_proxy_itl_seconds_count{{{raw_route}}}) == {gaps}")), "ITL is scraped")
    assert query(f"sum(kimik3_proxy_ttft_seconds_count{{{chat}}}) >= 1")
    assert query(f'sum(kimik3_proxy_errors_total{{{LABELS},kind="http_4xx"}})') == [1.0]
    # llama-server itself is on loopback behind the proxy, on its own port.
    assert httpx.get(f"http://127.0.0.1:{SERVER_PORT}/health", timeout=5).status_code == 200


def test_the_prompt_cache_hit_rate_from_the_servers_counter_and_the_replies_timings(prometheus: str) -> None:
    """Seed 001's cache hit rate (issue 27 item 8): the same prompt twice, the second from llama-server's cache. The
    proxy counts each reply's `timings.cache_n`/`prompt_n` as the real server sends them (non-streamed: in the
    reply; streamed: on the last event), and the server's own prompt_tokens_cached_total agrees."""
    cached = f'sum(kimik3_proxy_prompt_cached_tokens_total{{{LABELS},route="/v1/chat/completions"}})'
    evaluated = f'sum(kimik3_proxy_prompt_evaluated_tokens_total{{{LABELS},route="/v1/chat/completions"}})'
    before = (query(cached) or [0.0])[0], (query(evaluated) or [0.0])[0]
    messages = [{"role": "user", "content": "the prompt cache keeps this question " * 8}]
    timings = []
    for stream in (False, True):
        with httpx.stream(
            "POST",
            f"http://127.0.0.1:{PORT}/v1/chat/completions",
            timeout=120,
            headers={"Authorization": f"Bearer {API_KEY}"},
            json={"messages": messages, "max_tokens": 4, "stream": stream},
        ) as reply:
            assert reply.status_code == 200
            bodies = (
                [json.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: {")]
                if stream
                else [json.loads(reply.read())]
            )
        timings += [b["timings"] for b in bodies if "timings" in b]
    assert len(timings) == 2, timings  # one per reply, as the proxy reads them
    assert timings[1]["cache_n"] > 0  # the second asking of the same prompt came from the cache
    want = (before[0] + sum(t["cache_n"] for t in timings), before[1] + sum(t["prompt_n"] for t in timings))
    wait_for(
        lambda: (query(cached) or [None])[0] == want[0] and (query(evaluated) or [None])[0] == want[1],
        f"the proxy's prompt token counters reach {want}",
    )
    assert query(f"llamacpp:prompt_tokens_cached_total{{{LABELS}}} >= {timings[1]['cache_n']}")


def test_a_scripted_bad_tool_call_through_the_proxy_is_counted(prometheus: str, stub_exporter: SseStub) -> None:
    stub_exporter.script = [
        {
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"'},
                }
            ]
        }
    ]
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{STUB_PROXY}/v1", api_key=API_KEY, max_retries=0)
    streamed = client.chat.completions.create(
        model="kimi-k3",
        stream=True,
        messages=[{"role": "user", "content": "?"}],
        tools=[{"type": "function", "function": {"name": "get_weather"}}],
    )
    assert "".join(c.choices[0].delta.tool_calls[0].function.arguments or "" for c in streamed) == '{"city": "Oslo"'
    failures = f'kimik3_proxy_tool_call_parse_failures_total{{profile="{STUB}",kind="arguments"}}'
    wait_for(lambda: query(failures) == [1.0], "the parse failure is counted in Prometheus")


def test_no_secret_in_any_label_or_series(prometheus: str, deployed: Path) -> None:
    series = httpx.get(f"{PROM}/api/v1/series", params={"match[]": '{job="kimik3"}'}, timeout=5).json()
    assert series["status"] == "success" and len(series["data"]) > 20
    assert API_KEY not in json.dumps(series)
    exposition = httpx.get(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=5).text
    assert API_KEY not in exposition
    token = os.environ.get("HF_TOKEN")
    assert not token or token not in exposition
    # Nor in the exporter's argv (visible to every user in ps) or its config record.
    record = json.loads((deployed / "state" / "metrics" / NAME / "process.json").read_text())
    cmdline = Path(f"/proc/{record['pid']}/cmdline").read_bytes().decode()
    assert API_KEY not in cmdline and API_KEY not in json.dumps(record)


def test_status_watch_reads_the_running_exporter(prometheus: str, deployed: Path) -> None:
    # One streamed request through the proxy first: the TTFT row needs a sample, and the exporter may be a new one
    # (the destroy-and-apply test relaunches it; the order is random).
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{PORT}/v1", api_key=API_KEY, max_retries=0, timeout=120)
    assert [
        chunk
        for chunk in client.chat.completions.create(
            model=NAME, stream=True, max_tokens=4, messages=[{"role": "user", "content": "hi"}]
        )
    ]
    shown = kimik3(deployed, "status", "profile.yaml", "--watch", "--interval", "1s", "--iterations", "1").stdout
    assert "exporter pid" in shown and f":{METRICS_PORT}/metrics" in shown
    for row in ("converged", "server RSS", "page cache", "slots busy", "decode tok/s", "TTFT p50/p95"):
        assert row in shown, row
    # What the last apply did, apart from the profile's revert total (it said "1 reverts" for an apply that did
    # not revert): through the real exporter's exposition, the total's start from the counter's _created.
    assert re.search(r"ok, no revert; 0 reverts of this profile since \d{4}-\d\d-\d\d \d\d:\d\d UTC", shown), shown
    assert API_KEY not in shown


def test_a_second_apply_keeps_the_exporter_and_destroy_stops_it(prometheus: str, deployed: Path) -> None:
    record = json.loads((deployed / "state" / "metrics" / NAME / "process.json").read_text())
    plan = kimik3(deployed, "plan", "profile.yaml", "--detailed-exitcode", check=False)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    kimik3(deployed, "destroy", "profile.yaml")
    try:
        assert (
            not Path(f"/proc/{record['pid']}").exists()
            or b"metrics-serve" not in Path(f"/proc/{record['pid']}/cmdline").read_bytes()
        )
        wait_for(
            lambda: query(f'up{{instance="127.0.0.1:{METRICS_PORT}"}}') == [0.0], "prometheus sees the exporter gone"
        )
    finally:  # deployed again for the module's other tests, whichever run after this one (the order is random)
        kimik3(deployed, "apply", "profile.yaml", "--no-verify-server")
    wait_for(lambda: query(f'up{{instance="127.0.0.1:{METRICS_PORT}"}}') == [1.0], "prometheus sees it back")
