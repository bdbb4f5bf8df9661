"""The H200 record of issue 26 (tests/fixtures/h200/tune-vs-grid.json): `kimik3 tune` against the exhaustive grid
in three spaces (space 3, added 2026-12-04, is the one whose best lies inside: its grid measured twice), three
independent tune runs each, every run followed by the alternating re-measure of the grid's
best, the run's winner and the profile as written (`bash tools/gpu_proof/run-tune.sh prepare grid1`, `grid1 tune1`,
`grid2 tune2`, then `python3 tools/gpu_proof/tune_fixture.py DIR`).

EVERY run is checked against the issue's criterion, not the best one: the re-measured winner >= 0.97x the grid's
best (in the goal's direction), tune's wall <= 1/3 of the grid's, and never below the profile as written (the
re-measured winner at least as good as FILE, or FILE kept). Each ratio is recomputed from the rows kept beside it,
and each figure carries its spread. Until that run is folded the fixture is absent and these tests skip (no figure
here is made up); the 2026-12-03 record of the older search is test_tune_vs_grid_first.py's."""

from __future__ import annotations

import itertools
import json
import math
import statistics
from pathlib import Path

import pytest

FIXTURE = Path(__file__).parents[2] / "fixtures" / "h200" / "tune-vs-grid.json"
RECORD = json.loads(FIXTURE.read_text()) if FIXTURE.exists() else None
pytestmark = pytest.mark.skipif(
    RECORD is None or "spaces" not in RECORD,
    reason="issue 26's H200 run (two spaces x three tune runs) is not folded yet: "
    "tools/gpu_proof/run-tune.sh, then tune_fixture.py",
)
SPACES = (RECORD or {}).get("spaces", {})
RUNS = [(sid, run) for sid, space in SPACES.items() for run in space["runs"]]
RUN_IDS = [f"space{sid}-{run['run']}" for sid, run in RUNS]


def _id(knobs: dict) -> str:
    return json.dumps(knobs, sort_keys=True)


def _minimised(goal: str) -> bool:
    return goal.startswith("ttft-p95")


def _better_or_equal(goal: str, a: float, b: float) -> float:
    """a as a share of b in the goal's direction (1.0: as good; > 1: better)."""
    return b / a if _minimised(goal) else a / b


def test_three_spaces_and_three_runs_each_are_recorded() -> None:
    assert set(SPACES) == {"1", "2", "3"}
    assert SPACES["1"]["goal"] == "aggregate@4"
    for sid in ("2", "3"):
        assert SPACES[sid]["goal"].startswith("ttft-p95@4,decode>=") and SPACES[sid]["floor"] > 0
    assert all([run["run"] for run in space["runs"]] == ["a", "b", "c"] for space in SPACES.values())
    assert "n_cpu_moe: 16" in RECORD["profile"]  # the profile as written: the baseline of every search


@pytest.mark.parametrize("sid", sorted(SPACES))
def test_the_grid_is_exhaustive_and_its_best_follows_from_its_rows(sid: str) -> None:
    space = SPACES[sid]
    names = sorted(space["space"])
    cells = {_id(dict(zip(names, values))) for values in itertools.product(*(space["space"][n] for n in names))}
    rows = space["grid"]["rows"]
    assert {_id(r["knobs"]) for r in rows} == cells and len(rows) == len(cells)
    assert space["grid"]["wall_s"] == pytest.approx(sum(r["seconds"] for r in rows), abs=0.05)
    repeats = RECORD["bench"]["repeats"]
    ok = [r for r in rows if r["status"] == "ok"]
    assert all(
        len(r["figures"]) == repeats and r["figure"] == pytest.approx(statistics.median(r["figures"]), abs=0.002)
        for r in ok
    )
    feasible = [r for r in ok if r["feasible"]]
    sign = -1 if _minimised(space["goal"]) else 1
    best = max(feasible, key=lambda r: statistics.fmean(sign * math.log(f) for f in r["figures"]))
    assert best["knobs"] == space["grid_best"]["knobs"]
    if sid != "1":  # the floor binds: some cell breaks it
        assert len(feasible) < len(ok)
    print(f"\nspace {sid} grid best {best['knobs']}: {best['figure']} (±{(best['spread'] or 0) * 100:.1f} %)")


@pytest.mark.parametrize(("sid", "run"), RUNS, ids=RUN_IDS)
def test_every_run_meets_the_criterion(sid: str, run: dict) -> None:
    """>= 0.97x the grid's best, <= 1/3 of the grid's wall, never below the profile as written: each run."""
    space = SPACES[sid]
    again, tune = run["remeasure"], run["tune"]
    print(
        f"\nspace {sid} run {run['run']}: winner {tune['winner']}; re-measured {again['medians']} "
        f"(spreads {again['spreads']}); winner/grid best {again['winner_over_grid_best']}, "
        f"wall {run['tune_wall_over_grid_wall']}, gain over as written {again['winner_gain_over_baseline']}"
    )
    assert run["tune_wall_over_grid_wall"] <= 1 / 3
    assert again["winner_over_grid_best"] >= 0.97
    # never below FILE as written: FILE kept, or FILE breaks the goal's bound (space 2's floor) and the winner
    # does not, or the winner measured at least as good
    assert (
        again["winner_is_as_written"] or again["baseline_breaks_the_bound"] or again["winner_gain_over_baseline"] >= 1.0
    )
    assert again["feasible"]["tune_winner"]  # the winner met the goal's bounds when measured again
    assert run["tune_wall_over_grid_wall"] == pytest.approx(tune["wall_s"] / space["grid"]["wall_s"], abs=0.0015)


@pytest.mark.parametrize(("sid", "run"), RUNS, ids=RUN_IDS)
def test_the_remeasure_alternates_fresh_launches_and_its_ratios_are_ratios_of_medians(sid: str, run: dict) -> None:
    goal, again, tune = SPACES[sid]["goal"], run["remeasure"], run["tune"]
    roles = again["roles"]
    assert roles["grid_best"] == SPACES[sid]["grid_best"]["knobs"]
    assert roles["tune_winner"] == (tune["winner"] or tune["baseline"]) and roles["baseline"] == tune["baseline"]
    distinct = list(dict.fromkeys(_id(k) for k in roles.values()))
    slots = again["slots"]
    assert [_id(s["knobs"]) for s in slots] == distinct * RECORD["bench"]["rounds"]  # A B C A B C ...
    medians = again["medians"]
    for role, knobs in roles.items():
        figures = [s["figure"] for s in slots if _id(s["knobs"]) == _id(knobs) and s["figure"] is not None]
        assert medians[role] == pytest.approx(statistics.median(figures), abs=0.002)
        assert again["spreads"][role] is not None  # every figure reported with its spread
    assert again["winner_over_grid_best"] == pytest.approx(
        _better_or_equal(goal, medians["tune_winner"], medians["grid_best"]), abs=0.0015
    )
    assert again["winner_gain_over_baseline"] == pytest.approx(
        _better_or_equal(goal, medians["tune_winner"], medians["baseline"]), abs=0.0015
    )
    if again["winner_is_grid_best"]:
        assert again["winner_over_grid_best"] == 1.0 and "by construction" in again["winner_over_grid_best_note"]


@pytest.mark.parametrize(("sid", "run"), RUNS, ids=RUN_IDS)
def test_tune_writes_back_only_what_it_measured_better_and_reports_the_spread(sid: str, run: dict) -> None:
    tune = run["tune"]
    standings = {_id(s["knobs"]): s for s in tune["standings"]}
    draws = {}
    for t in tune["trials"]:
        draws.setdefault(_id(t["knobs"]), []).append(t)
    for kid, s in standings.items():
        assert s["draws"] == len(draws[kid])
        assert (s["spread"] is None) == (s["draws"] == 1)
    if tune["winner"] is None:
        assert "stays as written" in tune["verdict"]
    else:
        assert (
            "measurably better than the profile as written" in tune["verdict"]
            or "the profile as written does not meet the goal" in tune["verdict"]
        )
        assert standings[_id(tune["winner"])]["draws"] >= 2  # relaunched at least once after it led
    assert tune["trials"][0]["step"] == "as written" and tune["trials"][0]["knobs"] == tune["baseline"]


def _inside(knobs: dict, space: dict) -> bool:
    return all(min(space[k]) < v < max(space[k]) for k, v in knobs.items())


def test_space_3s_best_lies_inside_the_space_in_both_grids() -> None:
    """Issue 26's second space: the best is not at an edge. Space 2's best fell on a corner (the fewest slots, the
    smallest ubatch); space 3 widens both knobs by a step below, and its grid, measured twice on fresh machines,
    puts the best inside on every knob both times: one slot queues three of four requests, four break the floor."""
    space = SPACES["3"]
    grids = [
        (space["grid"]["rows"], space["grid_best"]),
        (space["grid_again"]["rows"], space["grid_again"]["grid_best"]),
    ]
    for rows, best in grids:
        assert _inside(best["knobs"], space["space"]), best
        sign = -1
        feasible = [r for r in rows if r["status"] == "ok" and r["feasible"]]
        assert (
            best["knobs"]
            == max(feasible, key=lambda r: statistics.fmean(sign * math.log(f) for f in r["figures"]))["knobs"]
        )
        four = [r for r in rows if r["knobs"]["parallel"] == max(space["space"]["parallel"])]
        assert four and not any(r["feasible"] for r in four)  # the floor binds where the slots are most
    assert space["grid_again"]["grid_best"]["knobs"] == space["grid_best"]["knobs"]
    assert space["trained_context"] >= 8192  # one slot may take the whole ctx_size 8192 (issue 27's refusal)
    print(
        f"\nspace 3 best {space['grid_best']['knobs']}: {space['grid_best']['figure']} "
        f"(±{space['grid_best']['spread'] * 100:.1f} %), again {space['grid_again']['grid_best']['figure']} "
        f"(±{space['grid_again']['grid_best']['spread'] * 100:.1f} %)"
    )
