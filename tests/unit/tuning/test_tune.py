"""`kimik3 tune` on fakes: goals and spaces, the candidate check (seed rules, slots, fixed threads),
the search (refused candidates never launched, a third of the space, the best few measured longer, the
profile as written among them), resuming after a kill, and `--write`'s in-place rewrite."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from support.fakes import FakeClock, MemoryState
from support.observed import observed

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.errors import InputError, LoadFailed
from kimik3_reconciler.model.bench import BenchRun, BenchSettings, LevelResult
from kimik3_reconciler.model.profile_edit import set_knobs
from kimik3_reconciler.model.profile_source import LoadedProfile, parse_profile
from kimik3_reconciler.model.tuning import candidates, parse_goal, parse_space, search_key
from kimik3_reconciler.planning.tune_space import check_candidate, default_space, placement_key
from kimik3_reconciler.tuning import Search

LLAMACPP_KNOBS = engine_for("llamacpp").tune_knobs  # (section, names): what --space takes on llama.cpp

# The head of a CPU profile of org/k3 built from mainline, by name and revision (test_tune_search's too).
CPU_HEAD = """\
apiVersion: kimik3/v1
name: %s
model: {repo: org/k3, revision: %s, quant: UD-Q2_K_XL}
build: {source: mainline, variant: cpu, cpu_features: []}
gpus: none
"""
PROFILE = (
    "# a CPU profile to tune\n"
    + CPU_HEAD % ("k3-tune", "ab" * 20)
    + """
serve:
  port: 18999        # the port
  batch: 4096
  ubatch: 4096       # hybrid default
  ctx_size: 4096
  parallel: 2        # slots

gate: {smoke: false}
"""
)


def loaded() -> LoadedProfile:
    return parse_profile(PROFILE, "tune.yaml")


def test_goals_parse_with_their_concurrency_and_bound() -> None:
    assert str(parse_goal("decode")) == "decode@1"
    goal = parse_goal("aggregate@8,ttft-p95<=2.5")
    assert (goal.metric, goal.concurrency, goal.max_ttft_p95) == ("aggregate", 8, 2.5)
    level = LevelResult(8, 8, 0, 1.0, 1.0, 3.0, 0.1, 10.0, 80.0, 50.0, None, None, None, 80)
    assert goal.score(level) is None  # p95 TTFT 3.0 s breaks the bound
    assert parse_goal("aggregate@8").score(level) == 80.0
    assert parse_goal("ttft-p95@8").score(level) == -3.0  # minimised
    for bad in ("aggregate", "speed@2", "decode@0"):
        with pytest.raises(InputError):
            parse_goal(bad)


def test_a_decode_floor_bounds_a_latency_goal() -> None:
    goal = parse_goal("ttft-p95@4,decode>=40")
    assert (goal.metric, goal.concurrency, goal.min_decode, goal.max_ttft_p95) == ("ttft-p95", 4, 40.0, None)
    assert str(goal) == "ttft-p95@4,decode>=40" and goal.minimised
    slow = LevelResult(4, 8, 0, 1.0, 0.5, 0.6, 0.05, 35.0, 80.0, 50.0, None, None, None, 80)
    fast = LevelResult(4, 8, 0, 1.0, 0.5, 0.6, 0.05, 45.0, 80.0, 50.0, None, None, None, 80)
    assert goal.score(slow) is None and "decode floor is broken" in goal.broken(slow)
    assert goal.score(fast) == -0.6 and goal.broken(fast) is None
    both = parse_goal("aggregate@8,ttft-p95<=2.5,decode>=10")
    assert (both.max_ttft_p95, both.min_decode) == (2.5, 10.0)
    for bad in ("ttft-p95@4,decode>=x", "aggregate@4,decode>=1,decode>=2", "aggregate@4,decode<=3"):
        with pytest.raises(InputError):
            parse_goal(bad)


def test_spaces_parse_and_unknown_knobs_are_refused() -> None:
    assert parse_space(("ubatch=256,512", "parallel=1,2"), LLAMACPP_KNOBS) == {
        "ubatch": (256, 512),
        "parallel": (1, 2),
    }
    assert len(candidates({"ubatch": (256, 512), "parallel": (1, 2), "threads": (1, 8)})) == 8
    assert parse_space(("n_cpu_moe=fit,24",), LLAMACPP_KNOBS) == {"n_cpu_moe": ("fit", 24)}
    for bad in ("threads=x", "ctx=1", "ubatch", "ubatch=fit"):
        with pytest.raises(InputError):
            parse_space((bad,), LLAMACPP_KNOBS)


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ("ubatch=0,512", "ubatch=0"),
        ("parallel=-1", "parallel=-1"),
        ("batch=2147483648", "batch=2147483648"),
        ("fit_target=-4096", "fit_target=-4096"),
        ("n_cpu_moe=fit,-2", "n_cpu_moe=-2"),
        ("load_mode=none,mmap", "mmap"),
        ("ubatch=512,512", "twice"),
    ],
)
def test_space_values_the_profile_refuses_are_refused_before_the_host(bad: str, said: str) -> None:
    # Was: accepted, then tune locked the host, required it converged and recorded a search of "never launched"
    # candidates. Now exit 2 naming --space, from the profile schema's own bounds.
    with pytest.raises(InputError) as caught:
        parse_space((bad,), LLAMACPP_KNOBS)
    assert "--space" in str(caught.value) and said in str(caught.value)
    assert caught.value.exit_code == 2


def test_the_default_space_of_a_cpu_profile_holds_ubatch_and_slots_with_the_running_values() -> None:
    space = default_space(engine_for("llamacpp"), loaded().profile, observed(loaded().profile))
    assert space == {"ubatch": (512, 1024, 2048, 4096), "parallel": (1, 2, 4, 8)}


def test_a_candidate_kimik3_would_refuse_is_refused_with_the_reason() -> None:
    base = loaded()
    facts = observed(base.profile)  # 8 physical cores
    ok = check_candidate(base.text, base.profile, {"ubatch": 512, "parallel": 4, "threads": 8}, facts, 512)
    assert ok.loaded is not None and ok.loaded.profile.serve.ubatch == 512 and ok.loaded.profile.serve.parallel == 4
    threads = check_candidate(base.text, base.profile, {"threads": 4}, facts, 512)
    assert threads.loaded is None and "physical cores (8 here)" in threads.refusal
    assert "--load-mode none" in check_candidate(base.text, base.profile, {"load_mode": "mmap"}, facts, 512).refusal
    slots = check_candidate(base.text, base.profile, {"parallel": 16}, facts, 512)
    assert "256 tokens a slot, below 512" in slots.refusal  # the profile rule slot-context-floor, before tune's own
    bench = check_candidate(base.text, base.profile, {"parallel": 8}, facts, 1024)
    assert "a slot holds serve.ctx_size/serve.parallel = 4096/8 = 512 tokens, a request needs 1024" in bench.refusal
    # batch is searched below ubatch: the seed rule (batch never below ubatch) refuses it before any load
    below = check_candidate(base.text, base.profile, {"ubatch": 4096, "batch": 1024}, facts, 512)
    assert below.loaded is None and "ubatch" in below.refusal


def test_write_keeps_comments_and_key_order_and_adds_the_figures() -> None:
    text = set_knobs(
        PROFILE, "serve", {"ubatch": 512, "parallel": 4, "n_cpu_moe": 3}, "kimik3 tune: 9.0 tok/s, was 6.0"
    )
    assert "# a CPU profile to tune" in text and "port: 18999        # the port" in text
    assert "  ubatch: 512        # hybrid default" in text and "  parallel: 4        # slots" in text
    assert "# kimik3 tune: 9.0 tok/s, was 6.0\nserve:" in text
    keys = [line.split(":")[0].strip() for line in text.split("serve:")[1].split("gate")[0].splitlines() if ":" in line]
    assert keys == ["port", "batch", "ubatch", "ctx_size", "n_cpu_moe", "parallel"]
    assert parse_profile(text, "x.yaml").profile.serve.n_cpu_moe == 3


class Killed(BaseException):
    """Stands for kill -9 in the middle of a candidate's launch."""


class FakeRunner:
    """A server whose aggregate tok/s is a function of the knobs; `fail` knobs crash on load; `kill_at`
    stops the process at that converge."""

    def __init__(self, kill_at: int | None = None, fail: tuple[int, ...] = ()) -> None:
        self.converged: list[dict[str, Any]] = []
        self.kill_at, self.fail = kill_at, fail
        self.settled: list[LoadedProfile] = []
        self.warmed: list[int] = []  # the converge count at each warm-up

    def converge(self, loaded: LoadedProfile) -> None:
        serve = loaded.profile.serve
        if self.kill_at is not None and len(self.converged) == self.kill_at:
            raise Killed()
        self.converged.append({"ubatch": serve.ubatch, "parallel": serve.parallel})
        if serve.ubatch in self.fail:
            raise LoadFailed(f"ubatch {serve.ubatch}: out of memory")

    def measure(self, loaded: LoadedProfile, settings: BenchSettings) -> tuple[BenchRun, str]:
        serve = loaded.profile.serve
        rate = 100.0 / (1 + abs(serve.ubatch - 1024) / 512) + serve.parallel
        c = settings.grid[0]
        level = LevelResult(
            c, c * settings.prompts, 0, 1.0, 0.5, 0.6, 0.05, 20.0, rate, 100.0, 20.0, 100.0, rate, int(rate)
        )
        run = BenchRun(loaded.profile.name, "f" * 16, "2026-01-01", settings, (level,), {})
        return run, "bench/x.json"

    def warm_up(self, loaded: LoadedProfile, settings: BenchSettings) -> None:
        self.warmed.append(len(self.converged))

    def settle(self, loaded: LoadedProfile) -> None:
        self.settled.append(loaded)

    def load_seconds(self, loaded: LoadedProfile, observed: Any) -> float:
        return 10.0


SPACE = {"ubatch": (512, 1024, 2048, 4096), "parallel": (1, 2), "threads": (4, 8)}
BASELINE = {"ubatch": 4096, "parallel": 2, "threads": 8}


def search(runner: FakeRunner, state: MemoryState, said: list[str], budget: float = 3600.0) -> Search:
    goal = parse_goal("aggregate@2")
    short = BenchSettings(grid=(2,), prompts=1, prompt_tokens=64, output_tokens=16)
    long = BenchSettings(grid=(2,), prompts=2, prompt_tokens=64, output_tokens=16, repetitions=2)
    key = search_key("k3-tune", PROFILE, goal, SPACE, {})
    return Search(runner, state, FakeClock(), said.append, loaded(), goal, SPACE, short, long, key, budget, finalists=2)


def test_a_search_draws_each_value_of_one_knob_at_a_time_then_the_final_rounds() -> None:
    """FakeRunner's figures are exact (no noise): once a candidate is drawn twice the pooled noise is nil and the
    best is told apart. parallel first (at FILE's ubatch), then ubatch at the best parallel; threads=4 refused."""
    runner, state, said = FakeRunner(fail=(2048,)), MemoryState(), []
    result = search(runner, state, said).run(observed(loaded().profile), BASELINE)
    assert len(result.refused) == 8 and all(k["threads"] == 4 for k, _ in result.refused)
    assert all(c["ubatch"] in (512, 1024, 2048, 4096) for c in runner.converged)
    stage1 = [(t.step, t.knobs["ubatch"], t.knobs["parallel"], t.status) for t in result.trials if t.stage == 1]
    assert stage1 == [
        ("as written", 4096, 2, "ok"),
        ("parallel", 4096, 1, "ok"),
        ("ubatch", 512, 2, "ok"),
        ("ubatch", 1024, 2, "ok"),
        ("ubatch", 2048, 2, "failed"),
    ]
    assert any("predicted" in line for line in said)
    stage2 = [t for t in result.trials if t.stage == 2]
    # FILE as written first, then the leader, then the contender not yet told apart from it; then, the contender
    # told apart, FILE and the leader until each has its 3 draws: the verdict looks once, at the end (issue 38)
    assert [(t.knobs["ubatch"], t.knobs["parallel"]) for t in stage2] == [
        (4096, 2),
        (1024, 2),
        (512, 2),
        (4096, 2),
        (1024, 2),
    ]
    assert result.winner is not None and result.winner.knobs == {"ubatch": 1024, "parallel": 2, "threads": 8}
    assert result.winner.figure == 102.0 and result.winner.draws == 3 and result.winner.spread == 0.0
    ranked = next(line for line in said if line.startswith("the search stage ranked"))
    # FILE, parallel=1, ubatch 512 and 1024 measured, 2048 failed (no figure: no rival): 5 draws, 3 rivals
    assert ranked.startswith("the search stage ranked 5 candidate(s) on 5 draw(s); the leader, ")
    assert "best of 3 candidate(s) besides the profile as written" in ranked and "(99.2 %, Bonferroni)" in ranked
    assert result.winner_loaded is not None and result.winner_loaded.profile.serve.ubatch == 1024
    assert "measurably better than the profile as written" in result.verdict
    assert not [t for t in result.trials if t.knobs["threads"] == 4]  # refused: never launched


def test_a_killed_search_resumes_without_measuring_again() -> None:
    state, said = MemoryState(), []
    with pytest.raises(Killed):
        search(FakeRunner(kill_at=2), state, said).run(observed(loaded().profile), BASELINE)
    record = copy.deepcopy(next(iter(state.records.values())))
    assert [t["status"] for t in record["trials"]] == ["ok", "ok", "running"]  # as written, one draw, the killed one
    resumed = FakeRunner()
    result = search(resumed, state, said).run(observed(loaded().profile), BASELINE)
    assert any(line.startswith("resuming the search") for line in said)
    uninterrupted = search(FakeRunner(), MemoryState(), []).run(observed(loaded().profile), BASELINE)
    assert [(t.knobs, t.stage) for t in result.trials] == [(t.knobs, t.stage) for t in uninterrupted.trials]
    # the killed draw runs first; the two measured before the kill are not relaunched
    assert resumed.converged[0] == {k: v for k, v in record["trials"][2]["knobs"].items() if k != "threads"}
    assert len(resumed.converged) == len(result.trials) - 2
    assert all(t.status != "running" for t in result.trials)
    assert state.read(search(resumed, state, []).key)["finished"] is True
    again = FakeRunner()  # a finished search run again replays its record: no launch at all
    assert search(again, state, []).run(observed(loaded().profile), BASELINE).winner.knobs == result.winner.knobs
    assert again.converged == []


def test_n_cpu_moe_fit_leaves_the_split_to_fit_and_a_number_pins_it() -> None:
    from kimik3_reconciler.planning.tune_space import section_values

    text = PROFILE.replace("  parallel: 2        # slots", "  parallel: 2        # slots\n  n_cpu_moe: 20")
    base = parse_profile(text, "tune.yaml")
    assert section_values(base.profile, {"n_cpu_moe": "fit"}) == {"n_cpu_moe": None}
    unpinned = set_knobs(text, "serve", section_values(base.profile, {"n_cpu_moe": "fit"}))
    assert "n_cpu_moe" not in unpinned and "# slots" in unpinned
    assert parse_profile(set_knobs(PROFILE, "serve", {"n_cpu_moe": 24}), "t.yaml").profile.serve.n_cpu_moe == 24
    assert sorted([{"n_cpu_moe": 24}, {"n_cpu_moe": "fit"}], key=lambda k: placement_key(LLAMACPP_KNOBS, k)) == [
        {"n_cpu_moe": "fit"},
        {"n_cpu_moe": 24},
    ]


def test_candidates_run_in_page_cache_order() -> None:
    assert sorted(
        [{"n_cpu_moe": 8, "ubatch": 512}, {"n_cpu_moe": 4, "ubatch": 4096}, {"n_cpu_moe": 8, "ubatch": 256}],
        key=lambda k: placement_key(LLAMACPP_KNOBS, k),
    ) == [{"n_cpu_moe": 4, "ubatch": 4096}, {"n_cpu_moe": 8, "ubatch": 256}, {"n_cpu_moe": 8, "ubatch": 512}]


def test_a_gpu_profile_with_a_manual_split_searches_it_and_fit() -> None:
    text = PROFILE.replace("build: {source: mainline, variant: cpu, cpu_features: []}", "build: {source: mainline}")
    text = text.replace("gpus: none", "gpus: all").replace(
        "  parallel: 2        # slots", "  parallel: 2        # slots\n  n_cpu_moe: 20"
    )
    gpu = parse_profile(text, "gpu.yaml").profile
    space = default_space(engine_for("llamacpp"), gpu, observed(gpu))
    assert space["n_cpu_moe"] == ("fit", 12, 16, 20, 24, 28) and "fit_target" not in space


def run_tune_cli(
    tmp_path,
    monkeypatch,
    runner: FakeRunner | None,
    *args: str,  # noqa: ANN001, ANN201
    records=None,
):  # noqa: ANN001
    """`kimik3 tune` on fakes (orchestrator, host lock, state) with `runner` standing in for DockerRunner (None: the
    real DockerRunner on the fake orchestrator); `records(orchestrator, loaded)`: state records written after the
    first apply."""
    from click.testing import CliRunner
    from support.fakes import FakeHub, fake_ports

    import kimik3_reconciler.cli.tune_cmd as tune_cmd
    import kimik3_reconciler.tuning as tuning
    from kimik3_reconciler.cli import main
    from kimik3_reconciler.orchestrator import Orchestrator
    from kimik3_reconciler.steps.report import NullReporter

    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    text = PROFILE.replace(
        "build: {source: mainline, variant: cpu, cpu_features: []}",
        "build: {source: mainline, variant: cpu, cpu_features: [], archive: src.tar.gz}",
    )
    (tmp_path / "src.tar.gz").write_bytes(b"source")
    path = tmp_path / "tune.yaml"
    path.write_text(text)
    hub = FakeHub("org/k3", "ab" * 20, {"UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00001.gguf": b"shard"}, tmp_path / "hub")
    ports, _ = fake_ports(hub)
    orchestrator = Orchestrator(ports, NullReporter(), tmp_path, tmp_path / "Dockerfile.llamacpp")
    orchestrator.apply(parse_profile(text, str(path)))

    class Context:
        def orchestrator(self, _file: str) -> Orchestrator:
            return orchestrator

    for key, record in (records(orchestrator, parse_profile(text, str(path))) if records else {}).items():
        ports.state.write(key, record)
    monkeypatch.setattr(tune_cmd, "_ctx", lambda *_: Context())
    if runner is not None:
        monkeypatch.setattr(tuning, "DockerRunner", lambda _engine: runner)
    run_tune_cli.ports = ports  # type: ignore[attr-defined]  # for the caller's look at the state afterwards
    return path, CliRunner().invoke(main, ["tune", str(path), "--goal", "aggregate@2", *args])


def test_a_budget_that_fits_fewer_than_three_launches_is_refused_before_any(tmp_path, monkeypatch) -> None:
    """Issue 38: FakeRunner's launch takes 10 s; --budget 25s fits two: exit 2 naming the budget needed, nothing
    converged or settled, no search record; --budget 30s fits three and tune says so before its first draw."""
    runner = FakeRunner()
    _, result = run_tune_cli(tmp_path, monkeypatch, runner, "--space", "ubatch=512,1024", "--budget", "25s")
    assert result.exit_code == 2, result.output
    assert "--budget 25 s fits 2 launch(es) at this host's load time (~10 s a launch)" in result.stderr
    assert "give --budget 1m or more (nothing was launched)" in result.stderr
    assert runner.converged == [] and runner.settled == []
    assert not [k for k in run_tune_cli.ports.state.records if k.startswith("tune/")]  # type: ignore[attr-defined]

    runner = FakeRunner()
    (tmp_path / "b").mkdir()
    _, result = run_tune_cli(tmp_path / "b", monkeypatch, runner, "--space", "ubatch=512,1024", "--budget", "30s")
    assert result.exit_code == 0, result.output
    assert "budget 30 s: 3 launch(es) at this host's load time (~10 s a launch)" in result.stderr
    assert runner.converged


def test_the_budget_is_counted_at_the_load_time_recorded_on_this_host(tmp_path, monkeypatch) -> None:
    """The real DockerRunner on the orchestrator's fakes (no GGUF layout there, so no placement forecast): the
    container's last load as recorded here (load/<name>.json, the health wait's record), 6 min as on the seed's
    host with its partial pre-read. --budget 15m fits two launches: refused (exit 2) naming 18m, nothing launched
    (no docker call after the record)."""
    from kimik3_reconciler.model.records import load_key

    def six_minutes(orchestrator, loaded_):  # noqa: ANN001, ANN202
        observed_ = orchestrator.observe(loaded_)
        six_minutes.calls = list(orchestrator.ports.docker.calls)  # type: ignore[attr-defined]
        return {load_key(loaded_.profile.name): {"seconds": 360.0, "bytes": observed_.model.total_bytes}}

    _, result = run_tune_cli(
        tmp_path, monkeypatch, None, "--space", "ubatch=512,1024", "--budget", "15m", records=six_minutes
    )
    assert result.exit_code == 2, result.output
    assert "--budget 15.0 min fits 2 launch(es) at this host's load time (~6.0 min a launch)" in result.stderr
    assert "give --budget 18m or more" in result.stderr
    assert run_tune_cli.ports.docker.calls == six_minutes.calls  # type: ignore[attr-defined]  # no stop, run, start


def test_tune_write_through_the_cli_rewrites_the_file_and_settles_on_it(tmp_path, monkeypatch) -> None:
    """The command end to end on fakes (orchestrator, host lock, state) with FakeRunner's figures: deterministic,
    so the written file is checked whatever a real machine's noise would have measured."""
    runner = FakeRunner()
    path, result = run_tune_cli(
        tmp_path, monkeypatch, runner, "--space", "ubatch=512,1024", "--space", "parallel=1,2", "--write"
    )
    assert result.exit_code == 0, result.output
    written = path.read_text()
    assert "# a CPU profile to tune" in written and "port: 18999        # the port" in written
    assert "  ubatch: 1024       # hybrid default" in written and "# kimik3 tune " in written
    assert "aggregate@2 102.00 tok/s (±0.0 %, 3 draws) measured, was aggregate@2 " in written  # 100/(1+0)+2
    assert [p.profile.serve.ubatch for p in runner.settled] == [1024]  # settled on what was written
    assert runner.settled[0].text == written


class NoisyRunner(FakeRunner):
    """A server whose benches are noisy: each knob set returns its `draws` in turn; and a cold one: the first
    bench after a converge reads COLD unless a warm-up ran in between."""

    COLD = 1.0

    def __init__(self, draws: dict[int, list[float]]) -> None:
        super().__init__()
        self.draws, self.warm = draws, False
        self.measured: list[int] = []

    def converge(self, loaded: LoadedProfile) -> None:
        super().converge(loaded)
        self.warm = False  # a (re)load: the server is cold again

    def warm_up(self, loaded: LoadedProfile, settings: BenchSettings) -> None:
        super().warm_up(loaded, settings)
        assert settings.prompts == 1 and settings.repetitions == 1 and settings.output_tokens <= 16
        self.warm = True

    def measure(self, loaded: LoadedProfile, settings: BenchSettings) -> tuple[BenchRun, str]:
        ubatch = loaded.profile.serve.ubatch
        self.measured.append(ubatch)
        queue = self.draws[ubatch]
        rate = queue.pop(0) if self.warm else self.COLD
        queue.append(rate)
        c = settings.grid[0]
        level = LevelResult(
            c, c * settings.prompts, 0, 1.0, 0.5, 0.6, 0.05, 20.0, rate, 100.0, 20.0, 100.0, rate, int(rate)
        )
        return BenchRun(loaded.profile.name, "f" * 16, "2026-01-01", settings, (level,), {}), f"bench/{ubatch}.json"


def noisy_search(runner: FakeRunner, state: MemoryState, repeats: int = 3) -> Search:
    goal = parse_goal("aggregate@2")
    short = BenchSettings(grid=(2,), prompts=1, prompt_tokens=64, output_tokens=32)
    long = BenchSettings(grid=(2,), prompts=2, prompt_tokens=64, output_tokens=32)
    space = {"ubatch": (512, 1024, 2048, 4096)}
    return Search(
        runner,
        state,
        FakeClock(),
        [].append,
        loaded(),
        goal,
        space,
        short,
        long,
        search_key("k3-tune", PROFILE, goal, space, {}),
        3600.0,
        finalists=2,
        max_trials=3,
        repeats=repeats,
    )


@pytest.mark.parametrize("written", [40.0, 60.0])
def test_a_lucky_first_draw_does_not_pick_the_winner(written: float) -> None:
    """512's first draw was lucky (300, then 90 and 80); 1024 is steadily faster (150, 140, 160): the final rounds
    relaunch both until 1024 leads on the mean of its draws. It is written back only when it beats FILE as written
    by the bound corrected for the 3 candidates it was chosen among (0.025 / 3 one-sided); 512's draws make the
    pooled noise ±42 %, so that bound is ~3.1x: 1024 is written back against FILE at 40, not at 60 (issue 38)."""
    runner = NoisyRunner(
        {512: [300.0, 90.0, 80.0], 1024: [150.0, 140.0, 160.0], 2048: [50.0], 4096: [written, written + 2, written + 1]}
    )
    result = noisy_search(runner, MemoryState()).run(observed(loaded().profile), {"ubatch": 4096})
    by = {s.knobs["ubatch"]: s for s in result.standings}
    assert by[512].figures == [300.0, 90.0, 80.0] and by[512].figure == 90.0 and by[512].spread > 0.5
    assert by[1024].figures == [150.0, 140.0, 160.0] and by[1024].figure == 150.0
    assert result.leader is not None and result.leader.knobs == {"ubatch": 1024}
    if written == 40.0:
        assert result.winner is not None and result.winner.knobs == {"ubatch": 1024}
    else:
        assert result.winner is None and "the bound corrected for 3 comparisons" in result.verdict
    assert result.baseline is not None and result.baseline.figures == [written, written + 2, written + 1]
    assert [t.stage for t in result.trials].count(1) == 4  # FILE as written and each other ubatch once


def test_inside_the_noise_the_profile_stays_as_written_and_tune_says_so() -> None:
    runner = NoisyRunner({512: [64.0, 55.0, 66.0], 1024: [50.0], 2048: [50.0], 4096: [60.0, 58.0, 63.0]})
    said: list[str] = []
    search = noisy_search(runner, MemoryState())
    search.say = said.append
    result = search.run(observed(loaded().profile), {"ubatch": 4096})
    assert result.leader is not None and result.leader.knobs == {"ubatch": 512}
    assert result.winner is None and "inside the noise of the profile as written" in result.verdict
    assert said[-1] == result.verdict


def test_the_warm_up_follows_every_converge_and_is_never_counted() -> None:
    runner = NoisyRunner({512: [200.0], 1024: [150.0], 2048: [50.0], 4096: [60.0]})
    result = noisy_search(runner, MemoryState()).run(observed(loaded().profile), {"ubatch": 4096})
    assert runner.warmed == list(range(1, len(runner.converged) + 1))  # one warm-up after each converge
    assert all(NoisyRunner.COLD not in t.figures and t.figure != NoisyRunner.COLD for t in result.trials)
    # the profile as written is drawn first, while the host runs it
    assert result.trials[0].step == "as written" and runner.converged[0] == {"ubatch": 4096, "parallel": 2}
    assert len(runner.measured) == sum(len(t.figures) for t in result.trials)


def test_without_the_warm_up_the_cold_bench_would_be_counted() -> None:
    """The fake's cold state is real to the search: the warm-up is what keeps it out of the figures."""
    runner = NoisyRunner({512: [200.0], 1024: [150.0], 2048: [50.0], 4096: [60.0]})
    search = noisy_search(runner, MemoryState())
    search.warm_up = False
    result = search.run(observed(loaded().profile), {"ubatch": 4096})
    assert any(NoisyRunner.COLD in t.figures for t in result.trials)


def test_tune_exits_1_when_every_candidate_it_launched_failed(tmp_path, monkeypatch) -> None:
    runner = FakeRunner(fail=(512, 1024))  # the profile as written (4096, already running) is measured
    path, result = run_tune_cli(tmp_path, monkeypatch, runner, "--space", "ubatch=512,1024,4096")
    assert result.exit_code == 1, result.output
    assert "every candidate tune launched failed (2; the first: ubatch " in result.output
    assert "the host runs FILE as written" in result.output
    assert [p.profile.serve.ubatch for p in runner.settled] == [4096]  # back on FILE as written
    assert "# kimik3 tune" not in path.read_text()


def test_tune_json_when_every_candidate_failed_is_one_document_with_the_trials_and_the_error(
    tmp_path, monkeypatch
) -> None:
    import json

    runner = FakeRunner(fail=(512, 1024))
    _, result = run_tune_cli(tmp_path, monkeypatch, runner, "--space", "ubatch=512,1024,4096", "--json")
    assert result.exit_code == 1
    document = json.loads(result.stdout)  # the whole of stdout: one document (was the trials, then the error)
    assert document["ok"] is False and document["error"]["type"] == "NothingMeasured"
    assert document["error"]["exit_code"] == 1 and len(document["trials"]) >= 3
    assert "every candidate tune launched failed" in result.stderr


def test_tune_json_carries_the_standings_with_their_spread_and_the_verdict(tmp_path, monkeypatch) -> None:
    import json

    _, result = run_tune_cli(tmp_path, monkeypatch, FakeRunner(), "--space", "ubatch=512,1024,4096", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    best = document["standings"][0]
    assert best["knobs"] == {"ubatch": 1024} and best["figure"] == 102.0 and best["draws"] == 3
    assert best["spread"] == 0.0 and document["winner"]["knobs"] == {"ubatch": 1024}
    assert "measurably better than the profile as written" in document["verdict"]
    assert document["noise"]["df"] >= 1 and document["written"] is False and "+  ubatch: 1024" in document["diff"]


def test_tune_exits_0_when_some_candidate_was_measured(tmp_path, monkeypatch) -> None:
    runner = FakeRunner(fail=(512,))
    _, result = run_tune_cli(tmp_path, monkeypatch, runner, "--space", "ubatch=512,1024,4096")
    assert result.exit_code == 0, result.output


def test_write_is_checked_before_the_search_and_rewrites_a_symlinks_target(tmp_path: Path) -> None:
    """`--write` rewrote FILE only after hours of search: /dev/stdin or a read-only checkout failed then; a symlinked
    profile had its link replaced by a plain file (cut off from the GitOps repo it pointed into)."""
    import os

    from kimik3_reconciler.cli.tune_cmd import write_target

    real = tmp_path / "repo" / "k3.yaml"
    real.parent.mkdir()
    real.write_text("x: 1\n")
    link = tmp_path / "k3.yaml"
    link.symlink_to(real)
    assert write_target(str(link)) == real.resolve()
    with pytest.raises(InputError, match="--write: /dev/stdin is not a regular file"):
        write_target("/dev/stdin")
    if os.geteuid() != 0:  # root writes anywhere
        real.parent.chmod(0o555)
        try:
            with pytest.raises(InputError, match="not writable"):
                write_target(str(real))
        finally:
            real.parent.chmod(0o755)


def test_a_search_killed_mid_way_still_settles_on_file_as_written_and_writes_nothing(tmp_path, monkeypatch) -> None:
    """tuning/session.tune (the lifecycle the CLI calls): whatever stops the search, the host is never left on a
    candidate, and --write writes only a winner."""
    runner = FakeRunner(kill_at=1)  # the second converge (the first candidate after the baseline's) is killed
    with pytest.raises(Killed):  # click's runner hands a BaseException on, as the real command would
        run_tune_cli(tmp_path, monkeypatch, runner, "--space", "ubatch=512,1024,4096", "--write")
    written = (tmp_path / "tune.yaml").read_text()
    assert "# kimik3 tune" not in written and "ubatch: 4096" in written
    assert [p.profile.serve.ubatch for p in runner.settled] == [4096] and runner.settled[0].text == written


def test_the_launches_a_budget_fits_at_the_seeds_load_times() -> None:
    """Seed 000's host: ~6 min a launch with the partial pre-read, ~17 min cold (issue 38)."""
    from kimik3_reconciler.errors import BudgetTooShort
    from kimik3_reconciler.tuning.session import launches_said

    assert (
        launches_said(7200.0, 17 * 60.0)
        == "budget 120.0 min: 7 launch(es) at this host's load time (~17.0 min a launch)"
    )
    assert "20 launch(es)" in launches_said(7200.0, 6 * 60.0)
    with pytest.raises(BudgetTooShort, match=r"fits 2 launch\(es\).*give --budget 51m or more") as refused:
        launches_said(45 * 60.0, 17 * 60.0)
    assert refused.value.exit_code == 2
    assert "no load time on record" in launches_said(600.0, 0.0)  # never loaded here: not refused, said


def test_a_resumed_search_is_not_refused_for_its_budget_and_settles_on_file(tmp_path, monkeypatch) -> None:
    """A killed search leaves the host on a candidate, maybe; its rerun is how the host gets back to FILE. The
    budget refusal (issue 38) is for a search not yet started: a resumed one with a budget that fits fewer than
    three launches goes on as far as the budget allows and settles on FILE as written (before: exit 2, nothing
    settled, the host left on the killed candidate)."""
    runner = FakeRunner(kill_at=1)
    with pytest.raises(Killed):
        run_tune_cli(tmp_path, monkeypatch, runner, "--space", "ubatch=512,1024,4096")
    records = run_tune_cli.ports.state.records  # type: ignore[attr-defined]
    killed = {k: v for k, v in records.items() if k.startswith("tune/")}
    assert killed and all(r.get("trials") for r in killed.values())

    runner = FakeRunner()
    (tmp_path / "b").mkdir()
    _, result = run_tune_cli(
        tmp_path / "b",
        monkeypatch,
        runner,
        "--space",
        "ubatch=512,1024,4096",
        "--budget",
        "25s",
        records=lambda *_: killed,
    )
    assert result.exit_code == 0, result.output
    assert "budget 25 s: 2 launch(es) at this host's load time (~10 s a launch)" in result.stderr
    assert "resumed" in result.stderr
    assert [p.profile.serve.ubatch for p in runner.settled] == [4096]  # back on FILE as written


def test_a_refused_budget_with_json_is_one_error_document_and_exit_2(tmp_path, monkeypatch) -> None:
    """--json: the refusal is the one JSON document on stdout (ok false, the error's class and message), exit 2."""
    import json

    runner = FakeRunner()
    _, result = run_tune_cli(tmp_path, monkeypatch, runner, "--space", "ubatch=512,1024", "--budget", "25s", "--json")
    assert result.exit_code == 2, result.output
    document = json.loads(result.stdout)
    assert document["ok"] is False and "give --budget 1m or more" in json.dumps(document)
    assert "BudgetTooShort" in json.dumps(document) and runner.converged == []
