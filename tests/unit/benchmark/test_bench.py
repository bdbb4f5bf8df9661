"""`kimik3 bench` on fakes: the level summary and its cross-check, exact prompts, the converged-only
refusal, runs kept per deployment fingerprint, and the CLI's table/compare (the real sweep against the demo
llama-server: tests/integration/test_bench_tune_docker.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from support.fakes import FAKE_PROFILE, FAKE_REVISION, FakeHub, FakeLoad, fake_ports

from kimik3_reconciler.benchmark import converged_deployment, exact_prompts, parse_metrics, run_sweep
from kimik3_reconciler.benchmark.store import keep, kept, latest_per_fingerprint
from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.errors import NotConverged
from kimik3_reconciler.model.bench import BenchRun, BenchSettings, RequestSample, percentile, summarise
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.orchestrator import Orchestrator
from kimik3_reconciler.steps.report import NullReporter
from kimik3_reconciler.verify.checks import Server

FILES = {"UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00001.gguf": b"shard" * 10}


@pytest.fixture
def orchestrator(tmp_path: Path) -> Orchestrator:
    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    ports, _ = fake_ports(FakeHub("org/k3", FAKE_REVISION, FILES, tmp_path / "hub"))
    ports.load = FakeLoad()
    return Orchestrator(ports, NullReporter(), tmp_path, tmp_path / "Dockerfile.llamacpp")


def small_sweep(orchestrator, output_tokens: int) -> BenchRun:  # noqa: ANN001 - the fake-ported Orchestrator
    """The fake profile applied, then a sweep of levels 1 and 2, one prompt a client."""
    loaded = parse_profile(FAKE_PROFILE, "test.yaml")
    orchestrator.apply(loaded)
    settings = BenchSettings(grid=(1, 2), prompts=1, output_tokens=output_tokens)
    return run_sweep(orchestrator, loaded, settings, converged_deployment(orchestrator, loaded))


def test_percentiles_interpolate_between_ranks() -> None:
    assert percentile([], 0.5) is None
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert math.isclose(percentile([1.0, 2.0, 3.0, 4.0], 0.95), 3.85)


def test_decode_rate_leaves_out_the_first_chunk_and_counts_held_back_tokens() -> None:
    # The first chunk carried 2 tokens (an incomplete UTF-8 byte held back), the last one ended at 11 of 12.
    sample = RequestSample(
        sent=0.0, first_token=0.4, last_token=1.4, tokens=12, prompt_tokens=64, first_tokens=2, streamed_tokens=11
    )
    assert sample.ttft == pytest.approx(0.4)
    assert sample.decode_rate == pytest.approx(9.0)
    assert RequestSample(0.0, None, None, 0, 64, "HTTP 503").decode_rate is None


def test_a_level_summary_cross_checks_the_client_against_timings_and_metrics() -> None:
    server = {"predicted_per_second": 10.0, "prompt_per_second": 100.0}
    samples = [
        RequestSample(0.0, 1.0, 2.0, 11, 100, None, server),  # client: 10 tok/s, 100 prompt tok/s
        RequestSample(0.0, 1.25, 2.25, 11, 100, None, server),  # 10 tok/s, 80 prompt tok/s
        RequestSample(0.0, None, None, 0, 100, "HTTP 503: busy"),
    ]
    level = summarise(2, samples, wall_s=2.25, metrics_tokens=24.0)
    assert (level.requests, level.errors, level.first_error) == (3, 1, "HTTP 503: busy")
    assert level.ttft_p50 == pytest.approx(1.125) and level.decode_p50 == pytest.approx(10.0)
    assert level.aggregate == pytest.approx(22 / 2.25) and level.client_tokens == 22
    assert level.decode_disagreement == pytest.approx(0.0)
    assert level.prompt_disagreement == pytest.approx(-0.1)  # median of 100 and 80 against the server's 100
    assert level.metrics_disagreement == pytest.approx(22 / 24 - 1)  # the counter saw 2 more tokens


def test_prometheus_text_is_read_for_llamacpp_series_only() -> None:
    text = "# HELP llamacpp:tokens_predicted_total n\nllamacpp:tokens_predicted_total 122\nother 5\nllamacpp:x bad\n"
    assert parse_metrics(text, "llamacpp:") == {"llamacpp:tokens_predicted_total": 122.0}
    assert parse_metrics(None, "llamacpp:") == {}
    # vLLM labels every sample (one per engine core): the counter is their sum
    vllm = (
        "# TYPE vllm:generation_tokens_total counter\n"
        'vllm:generation_tokens_total{engine="0",model_name="k3"} 32.0\n'
        'vllm:generation_tokens_total{engine="1",model_name="k3"} 10.0\n'
        'vllm:num_requests_running{engine="0",model_name="k3"} 1.0\n'
    )
    assert parse_metrics(vllm, "vllm:") == {"vllm:generation_tokens_total": 42.0, "vllm:num_requests_running": 1.0}


def test_prompts_have_the_exact_length_and_no_shared_prefix() -> None:
    prompts = exact_prompts(FakeLoad(), Server("http://x", None), count=5, length=700)
    assert [len(p) for p in prompts] == [700] * 5
    assert len({tuple(p[:8]) for p in prompts}) == 5


def test_bench_refuses_a_host_that_is_not_converged_naming_the_changes(orchestrator: Orchestrator) -> None:
    loaded = parse_profile(FAKE_PROFILE, "test.yaml")
    with pytest.raises(NotConverged) as refused:
        converged_deployment(orchestrator, loaded)
    assert refused.value.exit_code == 4 and "kimik3 apply test.yaml" in str(refused.value)
    assert any(p.startswith("container create") for p in refused.value.pending)
    assert orchestrator.ports.load.levels == []  # nothing was sent


def test_a_sweep_sends_c_times_prompts_per_level_and_is_kept_per_fingerprint(orchestrator: Orchestrator) -> None:
    loaded = parse_profile(FAKE_PROFILE, "test.yaml")
    orchestrator.apply(loaded)
    observed = converged_deployment(orchestrator, loaded)
    settings = BenchSettings(grid=(1, 4), prompts=2, prompt_tokens=32, output_tokens=21, repetitions=2)
    run = run_sweep(orchestrator, loaded, settings, observed)
    load = orchestrator.ports.load
    assert [(c, len(p), n) for c, p, n in load.levels] == [(1, 2, 21), (1, 2, 21), (4, 8, 21), (4, 8, 21)]
    assert all(len(prompt) == 32 for _, prompts, _ in load.levels for prompt in prompts)
    one, four = run.levels
    assert (one.requests, four.requests) == (4, 16)
    assert one.decode_p50 == pytest.approx(20.0) and one.decode_disagreement == pytest.approx(0.0)
    assert four.metrics_disagreement == pytest.approx(0.0)
    assert run.fingerprint == observed.container.fingerprint and run.knobs["serve.parallel"] == 2
    state = orchestrator.ports.state
    first = keep(state, run)
    assert first.startswith(f"bench/k3-test/{run.fingerprint}/")
    keep(state, BenchRun.from_json({**run.to_json(), "date": "2026-01-02T00:00:00+00:00"}))
    other = BenchRun.from_json({**run.to_json(), "fingerprint": "0123456789abcdef"})
    keep(state, other)
    runs = kept(state, "k3-test")
    assert len(runs) == 3 and runs[0].levels == run.levels
    assert [(r.fingerprint, r.date) for r in latest_per_fingerprint(runs)] == [
        (run.fingerprint, "2026-01-02T00:00:00+00:00"),
        ("0123456789abcdef", run.date),
    ]


def test_the_plot_is_written_as_png_or_svg_and_other_suffixes_are_refused(
    orchestrator: Orchestrator, tmp_path: Path
) -> None:
    from kimik3_reconciler.benchmark.plot import plot_runs
    from kimik3_reconciler.errors import InputError

    run = small_sweep(orchestrator, output_tokens=8)
    plot_runs([run, BenchRun.from_json({**run.to_json(), "fingerprint": "feedface00000000"})], tmp_path / "b.svg")
    plot_runs([run], tmp_path / "b.png")
    assert (tmp_path / "b.svg").read_text().lstrip().startswith("<?xml")
    assert (tmp_path / "b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(InputError):
        plot_runs([run], tmp_path / "b.pdf")


def test_the_tables_show_each_level_and_compare_runs_side_by_side(orchestrator: Orchestrator) -> None:
    from rich.console import Console

    from kimik3_reconciler.cli.bench_cmd import compare_table, level_table

    run = small_sweep(orchestrator, output_tokens=21)
    other = BenchRun.from_json(
        {**run.to_json(), "fingerprint": "feedface00000000", "levels": [run.levels[0].to_json()]}
    )
    console = Console(width=400, record=True)
    console.print(level_table(run))
    console.print(compare_table([run, other]))
    text = console.export_text()
    assert f"deployment {run.fingerprint}" in text and "+0.0%" in text  # the fakes' client agrees with timings
    row2 = next(line for line in text.splitlines() if line.startswith("│ 2 ") and "|" in line)
    assert row2.count("|") == 2 and row2.rstrip("│ ").endswith("-")  # the other run has no c=2 level


@pytest.mark.parametrize("name", ["b.pdf", "no-such-dir/b.png"])
def test_a_plot_path_that_cannot_be_written_is_refused_before_any_request(
    tmp_path: Path, monkeypatch, name: str
) -> None:
    """Adversary review: `kimik3 bench FILE --plot b.pdf` ran the whole sweep (minutes of load on the server) and only
    then refused the suffix; a --plot folder that does not exist failed the same way. Now exit 2 before loading FILE."""
    from click.testing import CliRunner

    import kimik3_reconciler.benchmark as benchmark
    from kimik3_reconciler import cli

    monkeypatch.setattr(benchmark, "run_sweep", lambda *a, **k: pytest.fail("the sweep ran before --plot was checked"))
    shown = CliRunner().invoke(
        cli.main,
        ["--state-dir", str(tmp_path / "state"), "bench", str(tmp_path / "p.yaml"), "--plot", str(tmp_path / name)],
    )
    assert shown.exit_code == 2 and str(tmp_path / name) in shown.output, shown.output


def test_a_request_longer_than_a_slot_is_refused_before_the_host(tmp_path: Path, monkeypatch) -> None:
    """Was: `bench --prompt-tokens 4000` on a 4096-token, 2-slot server locked nothing but read the host and sent
    every request into a 2048-token slot. Now exit 2 naming the options and the slot, with nothing observed."""
    from click.testing import CliRunner

    from kimik3_reconciler.cli import main

    room = engine_for("llamacpp").request_room(parse_profile(FAKE_PROFILE, "p.yaml").profile, None)
    assert BenchSettings(prompt_tokens=room[0] - 128, output_tokens=128).slot_refusal(*room) is None  # it fits
    said = BenchSettings(prompt_tokens=room[0] - 127, output_tokens=128).slot_refusal(*room)
    assert said is not None and "serve.ctx_size/serve.parallel" in said and f"= {room[0]}" in said
    said = BenchSettings(prompt_tokens=1921, output_tokens=128).slot_refusal(
        2048, "serve.ctx_size/serve.parallel = 4096/2"
    )
    assert said is not None and "4096/2 = 2048" in said and "--prompt-tokens 1921" in said
    profile = tmp_path / "p.yaml"
    profile.write_text(FAKE_PROFILE)
    monkeypatch.setenv("KIMIK3_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr("kimik3_reconciler.benchmark.converged_deployment", lambda *a: pytest.fail("the host was read"))
    loaded = parse_profile(FAKE_PROFILE, "p.yaml")
    too_long = loaded.profile.serve.ctx_size // loaded.profile.serve.parallel
    result = CliRunner().invoke(main, ["bench", str(profile), "--prompt-tokens", str(too_long)])
    assert result.exit_code == 2, result.output
    assert "--prompt-tokens" in result.output and "serve.ctx_size/serve.parallel" in result.output


@pytest.mark.parametrize(
    ("grid", "said"), [("1,1", "twice"), ("4 1 4", "twice"), ("0,1", "at least 1"), ("", "at least 1")]
)
def test_a_grid_level_twice_or_below_one_is_a_usage_error(grid: str, said: str) -> None:
    """A kept run has one result per level (BenchRun.level): `--grid 1,1` measured c=1 twice and --compare and the
    plot showed one. Exit 2 naming --grid, before the profile or the host is read."""
    from click.testing import CliRunner

    from kimik3_reconciler.cli import main

    result = CliRunner().invoke(main, ["bench", "no-such-profile.yaml", "--grid", grid])
    assert result.exit_code == 2 and "--grid" in result.output and said in result.output, result.output
