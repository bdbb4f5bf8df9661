"""The search logic of `kimik3 tune` against a scripted noisy objective with a known optimum (issue 26): many
seeds, the success rate printed (not timings asserted), and a floor on it that the logic really reaches.

Space 1 is the H200's own surface: the true figure of each cell is the exhaustive grid's median of three
(tests/fixtures/h200/tune-vs-grid-2026-12-03.json, aggregate@4, n_cpu_moe x ubatch), and every draw is that figure times a
launch's noise (lognormal, 8 % as measured between launches there). Space 2 has its best inside the space
(ubatch x parallel, TTFT p95 minimised under a decode floor). A run succeeds when what tune writes back is
>= 0.97x the optimum; it must never write back anything truly worse than the profile as written. The search's
cost is counted in draws (a draw = a launch, a warm-up and a bench) against the grid's 3 benches per cell."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
from support.fakes import FakeClock, MemoryState
from support.observed import observed
from test_tune import CPU_HEAD

from kimik3_reconciler.model.bench import BenchRun, BenchSettings, LevelResult
from kimik3_reconciler.model.profile_source import LoadedProfile, parse_profile
from kimik3_reconciler.model.tuning import knob_id, parse_goal
from kimik3_reconciler.tuning import Search
from kimik3_reconciler.tuning.evidence import Noise, Standing

PROFILE = (
    CPU_HEAD % ("k3-sim", "cd" * 20)
    + """\
serve:
  port: 18998
  ctx_size: 8192
  parallel: 4
  ubatch: 4096
  n_cpu_moe: 16
gate: {smoke: false}
"""
)

GRID = json.loads((Path(__file__).parents[2] / "fixtures" / "h200" / "tune-vs-grid-2026-12-03.json").read_text())
H200 = {(r["knobs"]["n_cpu_moe"], r["knobs"]["ubatch"]): r["figure"] for r in GRID["passes"][0]["grid"]["rows"]}
# A draw on the H200's 2.4 GB model (the fixture's own seconds): a load and the warm-up ~2.5 s; an 8-request
# bench ~2.3 s at 460 tok/s, longer as the candidate is slower (the same tokens at a lower rate).
LOAD_S, BENCH_S, BENCH_RATE = 2.5, 2.3, 460.0
SEEDS = 400


class SimulatedServer:
    """A CandidateRunner whose figures are `truth(serve)` times a lognormal noise drawn per launch (and a little
    per bench); the clock advances by a load on each relaunch and a bench on each measure."""

    def __init__(self, truth, clock: FakeClock, rng: random.Random, sigma: float) -> None:  # noqa: ANN001
        self.truth, self.clock, self.rng, self.sigma = truth, clock, rng, sigma
        self.running: tuple | None = None
        self.launch_noise = 1.0
        self.loads = 0

    def converge(self, loaded: LoadedProfile) -> None:
        serve = loaded.profile.serve
        knobs = (serve.n_cpu_moe, serve.ubatch, serve.parallel)
        if knobs != self.running:
            self.running, self.loads = knobs, self.loads + 1
            self.launch_noise = math.exp(self.rng.gauss(0.0, self.sigma))
            self.clock.t += LOAD_S

    def warm_up(self, loaded: LoadedProfile, settings: BenchSettings) -> None:
        pass

    def measure(self, loaded: LoadedProfile, settings: BenchSettings) -> tuple[BenchRun, str]:
        noise = self.launch_noise * math.exp(self.rng.gauss(0.0, self.sigma / 3))
        aggregate, ttft, decode = self.truth(loaded.profile.serve)
        self.clock.t += bench_seconds(aggregate)
        c = settings.grid[0]
        level = LevelResult(
            c,
            c * settings.prompts,
            0,
            1.0,
            ttft * noise,
            ttft * noise,
            0.01,
            decode / noise,
            aggregate * noise,
            100.0,
            None,
            None,
            None,
            100,
        )
        return BenchRun(loaded.profile.name, "f" * 16, "2026-01-01", settings, (level,), {}), "bench/sim.json"

    def settle(self, loaded: LoadedProfile) -> None:
        pass

    def load_seconds(self, loaded: LoadedProfile, observed_: Any) -> float:
        return LOAD_S


def bench_seconds(aggregate: float) -> float:
    return BENCH_S * BENCH_RATE / aggregate


def h200_truth(serve) -> tuple[float, float, float]:  # noqa: ANN001
    return H200[(serve.n_cpu_moe, serve.ubatch)], 0.3, 100.0


# Space 2: TTFT p95 at c4 falls with the slots (fewer requests queue), per-request decode falls with them too
# (more streams share a step); a floor of 80 tok/s rules out 4 slots, so the best is 3 slots, and ubatch has
# its best inside (1024): the optimum sits in the middle of both knobs.
UB_TTFT = {512: 1.25, 1024: 1.0, 2048: 1.1, 4096: 1.3}
SLOTS = {2: (1.5, 110.0), 3: (1.0, 90.0), 4: (0.7, 70.0)}


def interior_truth(serve) -> tuple[float, float, float]:  # noqa: ANN001
    ttft, decode = SLOTS[serve.parallel]
    return 120.0 + 60.0 * serve.parallel, 0.4 * ttft * UB_TTFT[serve.ubatch], decode


def run_once(
    space: dict,
    goal_text: str,
    truth,
    seed: int,
    budget_s: float,  # noqa: ANN001
    sigma: float = 0.08,
    finalists: int = 2,
    repeats: int = 3,
) -> tuple[dict[str, Any] | None, float, int, Search]:
    base = parse_profile(PROFILE, "sim.yaml")
    goal = parse_goal(goal_text)
    clock, rng = FakeClock(), random.Random(seed)
    runner = SimulatedServer(truth, clock, rng, sigma)
    short = BenchSettings(grid=(goal.concurrency,), prompts=1, prompt_tokens=1024, output_tokens=128)
    long = BenchSettings(grid=(goal.concurrency,), prompts=2, prompt_tokens=1024, output_tokens=128)
    search = Search(
        runner,
        MemoryState(),
        clock,
        lambda _: None,
        base,
        goal,
        space,
        short,
        long,
        f"tune/sim/{seed}.json",
        budget_s,
        finalists=finalists,
        repeats=repeats,
    )
    if knob_id(space) not in FEASIBLE:  # the candidate check parses every candidate's profile: once a space
        FEASIBLE[knob_id(space)] = search.prune(observed(base.profile))
    feasible, refused = FEASIBLE[knob_id(space)]
    baseline = {k: getattr(base.profile.serve, k) for k in space}
    runner.running = (base.profile.serve.n_cpu_moe, base.profile.serve.ubatch, base.profile.serve.parallel)
    result = search.search(feasible, refused, observed(base.profile), baseline)
    return (result.winner.knobs if result.winner else None), clock.t, runner.loads, search


FEASIBLE: dict[str, Any] = {}


def true_score(space_truth, knobs: dict[str, Any], goal_text: str) -> float | None:  # noqa: ANN001
    """The goal's score of the noiseless truth (None: the bound is broken)."""
    serve = parse_profile(PROFILE, "sim.yaml").profile.serve.model_copy(update=knobs)
    aggregate, ttft, decode = space_truth(serve)
    goal = parse_goal(goal_text)
    if goal.min_decode is not None and decode < goal.min_decode:
        return None
    return -ttft if goal.minimised else aggregate


def quality(score: float, best: float) -> float:
    """The written-back answer as a share of the optimum, in the goal's direction (1.0 = the optimum)."""
    return score / best if best > 0 else best / score


CASES = {
    "space 1 (H200 grid, aggregate@4)": (
        {"n_cpu_moe": (4, 10, 16, 22), "ubatch": (512, 1024, 2048, 4096)},
        "aggregate@4",
        h200_truth,
    ),
    "space 2 (interior, ttft-p95@4 with a decode floor)": (
        {"ubatch": (512, 1024, 2048, 4096), "parallel": (2, 3, 4)},
        "ttft-p95@4,decode>=80",
        interior_truth,
    ),
}


# (case, launch noise, the success-rate floor asserted). 8 % is the H200's: between fresh launches one bench of
# one candidate moved by 9 % there (tests/fixtures/h200/tune-vs-grid-2026-12-03.json's re-measure, 3 candidates x 3 launches),
# 3.6 % between benches of one launch. At that noise the best and the second best of space 1 (0.889 of it) are
# told apart in about 8 runs of 10 within a third of the grid's time; at half the noise in nearly every run. Space
# 1 at 8 % found it in 355 of 400 before the comparison with FILE was corrected for the rivals (issue 38), 317 since:
# the price of keeping FILE in >= 97.5 % of flat searches, paid where a third of the grid allows three draws.
RATES = [(name, 0.04, 0.95) for name in CASES] + [(list(CASES)[0], 0.08, 0.75), (list(CASES)[1], 0.08, 0.75)]


@pytest.mark.parametrize(("name", "sigma", "floor"), RATES, ids=[f"{n[:7]}-noise{s}" for n, s, _ in RATES])
def test_the_search_finds_the_optimum_in_nearly_every_seed_and_never_writes_back_a_loss(
    name: str, sigma: float, floor: float
) -> None:
    space, goal_text, truth = CASES[name]
    cells = [dict(zip(sorted(space), values)) for values in itertools.product(*(space[k] for k in sorted(space)))]
    scores = {knob_id(c): true_score(truth, c, goal_text) for c in cells}
    best = max(s for s in scores.values() if s is not None)
    serve = parse_profile(PROFILE, "sim.yaml").profile.serve
    written = scores[knob_id({k: getattr(serve, k) for k in space})]
    # the exhaustive grid: every cell a launch and 3 benches
    grid_s = sum(LOAD_S + 3 * bench_seconds(truth(serve.model_copy(update=c))[0]) for c in cells)
    budget = grid_s / 3 - 2 * LOAD_S  # a third of the grid, less the first converge and the last (settle)
    good = never_worse = kept = 0
    costs, loads = [], []
    for seed in range(SEEDS):
        winner, spent, launched, _ = run_once(space, goal_text, truth, seed, budget, sigma)
        chosen = scores[knob_id(winner)] if winner is not None else written
        kept += winner is None
        never_worse += written is None or (chosen is not None and chosen >= written)
        good += chosen is not None and quality(chosen, best) >= 0.97
        costs.append((spent + 2 * LOAD_S) / grid_s)
        loads.append(launched)
    rate = good / SEEDS
    print(
        f"\n{name}, launch noise {sigma:.0%}: >= 0.97x the optimum in {good}/{SEEDS} seeds ({rate:.1%}); "
        f"never below as written in {never_worse}/{SEEDS}; kept as written in {kept}; cost / grid: mean "
        f"{sum(costs) / SEEDS:.3f}, max {max(costs):.3f}; loads mean {sum(loads) / SEEDS:.1f} (grid {len(cells)})"
    )
    assert never_worse == SEEDS
    assert rate >= floor
    assert max(costs) <= 1 / 3 + 1e-9  # the budget holds in every seed (counted in simulated seconds, not timed)


def test_inside_the_noise_the_profile_stays_as_written() -> None:
    """Every cell equally fast: whatever the draws say, nothing is measurably better than the profile as written.
    The leader is the best of several equal candidates, so its comparison with FILE is corrected for them (issue
    38: at a plain one-sided 95 % FILE was kept in 358 of 400)."""
    space = {"ubatch": (512, 1024, 2048, 4096)}
    kept = sum(
        run_once(space, "aggregate@4", lambda serve: (300.0, 0.3, 100.0), seed, 600.0)[0] is None
        for seed in range(SEEDS)
    )
    print(f"\nequal cells (4, launch noise 8 %): the profile kept in {kept}/{SEEDS} runs ({kept / SEEDS:.1%})")
    assert kept >= 0.975 * SEEDS


# A real difference must still be found (tuning/__init__.py corrects the comparison with FILE for the rivals):
# (name, space, truth, launch noise, finalists, repeats, the found-share floor). The first is the vLLM measurement
# of docs/measurements.md (max_num_seqs 4 against 2 as written: 536.2 against 402.5 tok/s, 1.33x, ±2.4 % noise,
# `--repeats 2 --finalists 1`), on this simulator's `parallel`; the second the same ratio among four cells at the
# H200's launch noise (8 %): 394 of 400 before the correction, 329 since (three rivals, three draws each: the
# bound is 0.025 / 3 one-sided); `--repeats 4` finds it in ~94 % (docs/operations.md, tune).
GAINS = [
    (
        "vllm max_num_seqs, 2 candidates, noise 2.4 %",
        {"parallel": (2, 4)},
        lambda serve: ((536.2 if serve.parallel == 2 else 402.5), 0.3, 100.0),
        0.024,
        1,
        2,
        0.99,
    ),
    (
        "4 cells, noise 8 %",
        {"ubatch": (512, 1024, 2048, 4096)},
        lambda serve: ((400.0 if serve.ubatch == 1024 else 300.0), 0.3, 100.0),
        0.08,
        2,
        3,
        0.8,
    ),
]


@pytest.mark.parametrize(
    ("name", "space", "truth", "sigma", "finalists", "repeats", "floor"), GAINS, ids=["vllm-1.33x", "4cells-1.33x"]
)
def test_a_clear_gain_is_written_back(
    name: str,
    space: dict,
    truth,
    sigma: float,
    finalists: int,  # noqa: ANN001
    repeats: int,
    floor: float,
) -> None:
    better = {"parallel": 2} if "parallel" in space else {"ubatch": 1024}
    found = sum(
        run_once(space, "aggregate@4", truth, seed, 600.0, sigma, finalists, repeats)[0] == better
        for seed in range(SEEDS)
    )
    print(f"\n{name}: the 1.33x candidate written back in {found}/{SEEDS} runs ({found / SEEDS:.1%})")
    assert found >= floor * SEEDS


def test_pooled_noise_tells_apart_only_what_exceeds_the_spread() -> None:
    a = Standing.of({"x": 1}, [(110.0, 110.0, ""), (112.0, 112.0, ""), (108.0, 108.0, "")])
    b = Standing.of({"x": 2}, [(100.0, 100.0, ""), (102.0, 102.0, ""), (98.0, 98.0, "")])
    c = Standing.of({"x": 3}, [(102.0, 102.0, ""), (99.0, 99.0, ""), (104.0, 104.0, "")])
    noise = Noise.pooled([a, b, c])
    assert noise.df == 6 and noise.better(a, b) and not noise.better(b, a)
    assert not noise.better(c, b)  # 1.7 % apart with a ±2 % spread each: inside the noise
    assert a.figure == 110.0 and a.spread == pytest.approx(0.0182, abs=1e-3)
    single = Standing.of({"x": 4}, [(500.0, 500.0, "")])
    other = Standing.of({"x": 5}, [(100.0, 100.0, "")])
    assert not Noise.pooled([single, other]).better(single, other)  # nothing drawn twice: no noise known yet
    assert Noise.pooled([single, b]).better(single, other)  # 5x apart, with b's draws saying ±2 %
    grazed = Standing.of({"x": 6}, [(90.0, 90.0, ""), (95.0, None, "the decode floor is broken")])
    assert grazed.feasible  # one draw in two broke the bound: judged by the rest
    broken = Standing.of({"x": 7}, [(90.0, None, "floor"), (95.0, None, "floor"), (92.0, 92.0, "")])
    assert not broken.feasible and broken.detail == "floor" and noise.better(a, broken)
    once = Standing.of({"x": 8}, [(90.0, None, "floor")])
    assert not once.feasible and once.doubtful  # one more draw meeting the bound would make it feasible
    failed = Standing.of({"x": 9}, [(None, None, "llama-server exited"), (95.0, 95.0, "")])
    assert not failed.feasible and not failed.doubtful  # a crash is no doubt


def test_the_t_bound_is_students_quantile_at_any_level() -> None:
    """The corrected level (0.025 / rivals) can be any number: the bound is computed, not looked up; these are the
    printed tables' values (one-sided)."""
    from kimik3_reconciler.tuning.evidence import t_bound

    for alpha, df, table in [
        (0.05, 1, 6.314),
        (0.05, 6, 1.943),
        (0.05, 30, 1.697),
        (0.025, 10, 2.228),
        (0.005, 3, 5.841),
        (0.01, 20, 2.528),
        (0.05, 1000, 1.646),
    ]:
        assert t_bound(alpha, df) == pytest.approx(table, abs=1e-3)
    assert t_bound(0.05, 0) == math.inf
