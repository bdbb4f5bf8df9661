"""What vLLM looks like on the wire, read through the engine seam (issue 25 §2): its port refuses connections
while it loads (a running container whose /health does not answer is loading, to observe, the plan and the
exporter), its log lines are the load's phase, `vllm:*` families pass through the exporter with no /slots asked,
and `status --watch` reads its queue, KV usage, prefix-cache hits and TTFT/ITL/e2e histograms by the engine's
names (vLLM 0.32's, as its /metrics serves them; the integration test reads a real one)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import generate_latest
from support.fakes import FakeHub, fake_ports
from support.fakes.docker import container_inspect
from support.json_http import JsonHandler
from support.observed import observed

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.exporter.registry import deployment_registry
from kimik3_reconciler.exporter.watch import samples_of, watch_rows
from kimik3_reconciler.model.labels import WHILE_LOADING
from kimik3_reconciler.model.metrics import ExporterConfig
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.observe.docker_objects import collect_container
from kimik3_reconciler.planning.health_step import load_timeout
from kimik3_reconciler.planning.launch import render_launch
from kimik3_reconciler.ports import ChatRequest
from kimik3_reconciler.steps.health import load_phase

PROFILE = """apiVersion: kimik3/v1
name: k3-vllm
engine: vllm
model: {repo: org/tiny, revision: %s}
image: {ref: "127.0.0.1:5000/kimik3-test/vllm-cpu:0.32.0@sha256:%s"}
gpus: none
serve: {port: 18998}
vllm: {tensor_parallel_size: 1, attention_backend: null, attention_config: null, enforce_eager: true}
""" % ("a" * 40, "b" * 64)
# A vLLM 0.32 /metrics, cut to what kimik3 reads (the names of vllm/v1/metrics/loggers.py).
VLLM_METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="k3-vllm"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="k3-vllm"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="k3-vllm"} 0.25
# HELP vllm:prefix_cache_queries Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="k3-vllm"} 400.0
# HELP vllm:prefix_cache_hits Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="k3-vllm"} 100.0
# HELP vllm:generation_tokens Number of generation tokens processed.
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="k3-vllm"} %s
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="k3-vllm"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="k3-vllm"} 4.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="k3-vllm"} 4.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="k3-vllm"} 4.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="k3-vllm"} 1.0
"""


def _world(tmp_path: Path):
    profile = parse_profile(PROFILE, "p.yaml").profile
    ports, docker = fake_ports(FakeHub("org/tiny", "a" * 40, {}, tmp_path / "hub"))
    launch = render_launch(profile, observed(profile), profile.image.ref, profile.image.digest)
    docker.containers[launch.spec.name] = container_inspect(launch.spec, "c" * 64, None, "running", None)
    return profile, ports, docker, launch


def test_a_running_vllm_container_that_refuses_is_loading_and_a_llama_one_is_not(tmp_path: Path) -> None:
    profile, ports, docker, launch = _world(tmp_path)
    assert dict(launch.spec.labels)[WHILE_LOADING] == "refused"
    ports.http.health = lambda url: "unreachable"  # nothing listens yet: the port refuses
    assert collect_container(docker, ports.http, launch.spec.name, engine_for("vllm").log_signs).health == "loading"
    labels = docker.containers[launch.spec.name]["Config"]["Labels"]
    del labels[WHILE_LOADING]  # a llama-server container: 503 is loading, a refusal is not
    assert collect_container(docker, ports.http, launch.spec.name, engine_for("vllm").log_signs).health == "unreachable"


def test_the_exporter_says_loading_asks_no_slots_and_passes_vllms_families(tmp_path: Path) -> None:
    profile, ports, docker, launch = _world(tmp_path)
    config = ExporterConfig(
        profile="k3-vllm",
        labels={"profile": "k3-vllm"},
        bind="127.0.0.1",
        port=19201,
        container=launch.spec.name,
        server_url="http://127.0.0.1:18998",
        engine="vllm",
    )
    assert ExporterConfig.from_json(config.to_json()).engine == "vllm"
    asked: list[str] = []
    ports.http.health = lambda url: "unreachable"
    ports.http.get = lambda url, api_key=None, timeout_s=5.0: (asked.append(url), (0, "refused"))[1]
    loading = samples_of(generate_latest(deployment_registry(config, ports)).decode())
    assert loading["kimik3_server_loading"][0][1] == 1.0 and loading["kimik3_server_up"][0][1] == 0.0
    ports.http.health = lambda url: "ok"
    ports.http.get = lambda url, api_key=None, timeout_s=5.0: (
        asked.append(url),
        (200, VLLM_METRICS % "50.0") if url.endswith("/metrics") else (404, "Not Found"),
    )[1]
    text = generate_latest(deployment_registry(config, ports)).decode()
    assert not any(url.endswith("/slots") for url in asked)
    up = samples_of(text)
    assert up["kimik3_server_up"][0][1] == 1.0
    assert up["vllm:num_requests_waiting"][0][0]["profile"] == "k3-vllm"  # re-labelled with the deployment's
    sources = {labels["source"]: value for labels, value in up["kimik3_exporter_source_up"]}
    assert "server_slots" not in sources and sources["server_metrics"] == 1.0


def test_status_watch_reads_vllms_queue_cache_and_latency_by_the_engines_names() -> None:
    series = engine_for("vllm").series
    before, now = samples_of(VLLM_METRICS % "50.0"), samples_of(VLLM_METRICS % "150.0")
    rows = {r.name: r.value for r in watch_rows(before, now, 2.0, series)}
    assert rows["requests"] == "2 processing, 3 queued"
    assert rows["decode tok/s"] == "50.0"
    assert rows["KV cache used"] == "25 %"
    assert rows["prefix cache hits"].startswith("25 % of 400 prompt tokens")
    assert rows["TTFT p50/p95"].endswith("(since the server started)")  # no request between the two readings
    llama_rows = {r.name for r in watch_rows(before, now, 2.0)}  # llama.cpp's names find none of these
    assert not {"requests", "KV cache used", "prefix cache hits", "TTFT p50/p95"} & llama_rows


def test_vllms_log_lines_are_the_load_phase_and_its_startup_is_allowed_for() -> None:
    line = "(APIServer pid=1) INFO 12-03 23:41:07 [gpu_model_runner.py:2602] Loading weights took 0.05 seconds\n"
    assert load_phase(line) == "Loading weights took 0.05 seconds"
    assert load_phase("0.12.345.678 I llama_model_loader: loaded meta data\n") == "llama_model_loader: loaded meta data"
    vllm, llamacpp = engine_for("vllm").readiness, engine_for("llamacpp").readiness
    assert load_timeout(0, vllm.startup_s) - load_timeout(0, llamacpp.startup_s) == 780.0
    assert vllm.loading == "its port refuses connections"


def _safetensors(metadata: dict[str, str]) -> bytes:
    import json
    import struct

    header = json.dumps({"__metadata__": metadata, "w": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}})
    return struct.pack("<Q", len(header)) + header.encode() + b"\0" * 4


def test_a_checkpoint_says_random_weights_in_its_first_shards_safetensors_metadata(tmp_path: Path) -> None:
    """vLLM opens the checkpoint folder ("."): verify judges content unless its first shard's header says it is one of
    kimik3's random tiny models; no marker, another value or an unreadable header is a real model."""
    from kimik3_reconciler.model.facts import ModelFact, RemoteFile
    from kimik3_reconciler.observe.served_weights import served_weights

    first, second = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    files = (RemoteFile(path=second, size=8), RemoteFile(path=first, size=8), RemoteFile(path="config.json", size=2))
    model = ModelFact(repo="org/tiny", revision="a" * 40, quant="", cache_dir=str(tmp_path / "hub"), files=files)
    (tmp_path / "hub" / "cache").mkdir(parents=True)
    hub = FakeHub("org/tiny", "a" * 40, {}, tmp_path / "hub")
    for metadata, random in (
        ({"format": "pt", "kimik3.weights": "random"}, True),
        ({"format": "pt"}, False),
        ({"kimik3.weights": "real"}, False),
    ):
        (tmp_path / "hub" / "cache" / first).write_bytes(_safetensors(metadata))
        (tmp_path / "hub" / "cache" / second).write_bytes(_safetensors({"kimik3.weights": "random"}))
        judged = served_weights(hub, model, engine_for("vllm").model_entry(model), engine_for("vllm").weight_headers)
        assert judged.random is random and first in judged.source, judged
    (tmp_path / "hub" / "cache" / first).write_bytes(b"not safetensors")
    assert not served_weights(hub, model, ".", None).random


def test_verify_skips_the_vision_probe_on_vllm_saying_why(tmp_path: Path) -> None:
    from kimik3_reconciler.verify.checks import Session, vision
    from kimik3_reconciler.verify.report import Status

    profile = parse_profile(PROFILE, "p.yaml").profile
    session = Session(None, None, profile, True, engine_for("vllm").reasoning_field)  # type: ignore[arg-type]
    status, detail = vision(session)  # nothing is asked of the server
    assert status is Status.SKIPPED and "engine vllm" in detail


def test_the_prompt_check_renders_through_vllms_tokenize_when_there_is_no_apply_template() -> None:
    """The real adapter against an HTTP stub shaped like vLLM: /apply-template 404, /tokenize renders the messages
    (with the served model's name), /detokenize gives the text back."""
    import json
    import threading
    from http.server import ThreadingHTTPServer

    from kimik3_reconciler.adapters.openai_chat import OpenAIChat

    seen: list[tuple[str, dict]] = []

    class Vllm(JsonHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, body))
            if self.path == "/tokenize" and body.get("model") == "k3-vllm":
                text = "".join(f"<{m['role']}>{m['content']}" for m in body["messages"])
                answer = {"count": len(text), "max_model_len": 512, "tokens": [ord(c) for c in text]}
            elif self.path == "/detokenize":
                answer = {"prompt": "".join(chr(t) for t in body["tokens"])}
            else:
                self.send_json(404, {"detail": "Not Found"})
                return
            self.send_json(200, answer)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Vllm)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        prompt = OpenAIChat().apply_template(
            ChatRequest(
                f"http://127.0.0.1:{server.server_port}",
                None,
                [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
                model="k3-vllm",
            )
        )
    finally:
        server.shutdown()
    assert prompt == "<user>hi<assistant>yo"
    assert [path for path, _ in seen] == ["/apply-template", "/tokenize", "/detokenize"]
    assert seen[1][1]["add_generation_prompt"] is True
