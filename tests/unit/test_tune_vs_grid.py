"""The H200 record of `kimik3 tune` vs the exhaustive grid (tests/fixtures/h200/tune-vs-grid.json, issue 16).

The fixture is a measurement (tools/gpu_proof/run-tune.sh, folded by tune_fixture.py); these tests guard its
shape and that every ratio the closing note quotes follows from the rows kept beside it."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest

FIXTURE = Path(__file__).parents[1] / "fixtures" / "h200" / "tune-vs-grid.json"
RECORD = json.loads(FIXTURE.read_text())
PASSES = RECORD["passes"]


def _id(knobs: dict) -> str:
    return json.dumps(knobs, sort_keys=True)


def _space_ids() -> set[str]:
    names = sorted(RECORD["space"])
    return {_id(dict(zip(names, values))) for values in itertools.product(*(RECORD["space"][n] for n in names))}


def test_the_record_names_its_setting():
    assert RECORD["goal"] == "aggregate@4"
    assert RECORD["bench"]["long_requests"] == 4 * RECORD["bench"]["short_requests"]
    assert "n_cpu_moe: 16" in RECORD["profile"]  # the profile as written: the baseline of both searches
    assert len(PASSES) == 2


@pytest.mark.parametrize("run", PASSES, ids=["pass1", "pass2"])
def test_the_grid_is_exhaustive_and_every_split_keeps_experts_on_the_cpu(run):
    rows = run["grid"]["rows"]
    assert {_id(r["knobs"]) for r in rows} == _space_ids() and len(rows) == len(_space_ids())
    assert all(r["status"] == "ok" and r["figure"] > 0 for r in rows)
    assert all(0 < r["knobs"]["n_cpu_moe"] < RECORD["model"]["moe_layers"] for r in rows)
    assert run["grid"]["loads"] == len(rows)
    assert run["grid"]["wall_s"] == pytest.approx(sum(r["seconds"] for r in rows), abs=0.05)
    # the bench client agreed with the server's own counters in every row (printed, not a timing assertion)
    assert all(r["metrics_disagreement"] == 0 for r in rows)


@pytest.mark.parametrize("run", PASSES, ids=["pass1", "pass2"])
def test_tune_stayed_within_its_trial_budget(run):
    tune = run["tune"]
    stage1 = [t for t in tune["trials"] if t["stage"] == 1]
    stage2 = [t for t in tune["trials"] if t["stage"] == 2]
    assert len(stage1) == tune["max_trials"] + 1  # + the profile as written
    assert len(stage2) == tune["finalists"] + 1
    assert _id(tune["winner"]) in _space_ids()
    best2 = max(stage2, key=lambda t: t["figure"])
    assert _id(best2["knobs"]) == _id(tune["winner"]) and best2["figure"] == tune["winner_figure"]
    assert next(t for t in stage2 if _id(t["knobs"]) == _id(tune["baseline"]))["figure"] == tune["baseline_figure"]


@pytest.mark.parametrize("run", PASSES, ids=["pass1", "pass2"])
def test_the_ratios_follow_from_the_rows(run):
    rows, tune, stated = run["grid"]["rows"], run["tune"], run["ratios"]
    by = {_id(r["knobs"]): r["figure"] for r in rows}
    best = max(rows, key=lambda r: r["figure"])
    assert stated["grid_best"] == best["knobs"] and stated["grid_best_figure"] == best["figure"]
    assert stated["winner_is_grid_best"] == (_id(tune["winner"]) == _id(best["knobs"]))
    expect = {
        "winner_figure_over_grid_best": tune["winner_figure"] / best["figure"],
        "grid_figure_of_winner_over_grid_best": by[_id(tune["winner"])] / best["figure"],
        "tune_wall_over_grid_wall": tune["wall_s"] / run["grid"]["wall_s"],
        "winner_gain_over_baseline": tune["winner_figure"] / tune["baseline_figure"],
        "grid_gain_of_winner_over_baseline": by[_id(tune["winner"])] / by[_id(tune["baseline"])],
    }
    for name, value in expect.items():
        assert math.isclose(stated[name], value, abs_tol=0.0015), name


def test_what_the_closing_note_reports():
    """The figures quoted in the report, as measured (a re-run must update the note and this test together)."""
    first, second = (p["ratios"] for p in PASSES)
    assert first["winner_is_grid_best"] and first["grid_figure_of_winner_over_grid_best"] == 1.0
    assert (first["winner_figure_over_grid_best"], second["winner_figure_over_grid_best"]) == (0.888, 0.96)
    assert second["grid_figure_of_winner_over_grid_best"] == 0.862
    assert all(p["ratios"]["tune_wall_over_grid_wall"] <= 1 / 3 for p in PASSES)
    assert all(p["ratios"]["winner_gain_over_baseline"] > 1.2 for p in PASSES)
    assert all(p["tune"]["winner"]["n_cpu_moe"] == min(RECORD["space"]["n_cpu_moe"]) for p in PASSES)
