"""Fold what run-tune.sh brought back (results.tar.gz unpacked: gridS.jsonl, gridS-summary.json, tuneSR.json and
remeasureSR.json of both spaces and every run) into the fixture tests/fixtures/h200/tune-vs-grid.json (issue 26):
every run of both spaces, each with its tune record (draws, standings with their spread, the verdict), its
alternating re-measure, and the ratios the criterion names (re-measured winner / grid best in the goal's
direction, tune wall / grid wall, re-measured winner / profile as written).

    python3 tools/gpu_proof/tune_fixture.py RESULTS_DIR [--keep FIXTURE] [--server TEXT] [--grid-again S:DIR] > NEW.json

--keep: the spaces FIXTURE records that RESULTS_DIR lacks are kept as they are (space 3 was measured on another
day than spaces 1 and 2); --server: what served this folder's spaces (recorded per space); --grid-again: space S's
grid measured again on a fresh machine (DIR holds its gridS.jsonl and summary), kept beside the first.

tests/unit/proofs/test_tune_vs_grid.py checks every run against the criterion and recomputes every ratio from the rows
kept here.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tune_vs_grid import PROFILE, SPACES, goal_of, grid_best, read_rows, standing  # noqa: E402


def r3(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(x, digits)


def grid_rows(rows: list[dict], goal) -> list[dict]:  # noqa: ANN001
    out = []
    for r in rows:
        levels = r.get("levels") or []
        s = standing(goal, r["knobs"], levels)
        out.append(
            {
                "knobs": r["knobs"],
                "status": r["status"],
                "seconds": r["seconds"],
                "figures": [r3(f) for f in s.figures],
                "figure": r3(s.figure),
                "spread": r3(s.spread, 4),
                "feasible": s.feasible,
                "detail": r.get("detail") or s.detail,
                "aggregate": [r3((lv or {}).get("aggregate"), 2) for lv in levels],
                "ttft_p95": [r3((lv or {}).get("ttft_p95")) for lv in levels],
                "decode": [r3((lv or {}).get("decode_p50"), 2) for lv in levels],
                "metrics_disagreement": [(lv or {}).get("metrics_disagreement") for lv in levels],
            }
        )
    return out


def one_run(folder: Path, space_id: str, run_id: str, grid_wall: float) -> dict | None:
    tune_path = folder / f"tune{space_id}{run_id}.json"
    if not tune_path.exists():
        return None
    tune = json.loads(tune_path.read_text())
    trials = [
        {k: t.get(k) for k in ("knobs", "stage", "step", "status", "figure", "ttft_p95", "seconds", "detail")}
        for t in tune["trials"]
    ]
    for t in trials:
        t["figure"], t["ttft_p95"] = r3(t["figure"]), r3(t["ttft_p95"])
    run = {
        "run": run_id,
        "tune": {
            "wall_s": tune["wall_s"],
            "budget_s": tune["budget_s"],
            "first_converge_s": tune["first_converge_s"],
            "predicted_s": r3(tune["predicted_s"], 1),
            "loads": len(tune["loads"]),
            "winner": tune["winner"],
            "leader": tune["leader"],
            "baseline": tune["baseline"],
            "baseline_standing": tune["baseline_standing"],
            "verdict": tune["verdict"],
            "noise": tune["noise"],
            "standings": tune["standings"],
            "trials": trials,
            "refused": tune["refused"],
        },
    }
    again_path = folder / f"remeasure{space_id}{run_id}.json"
    if again_path.exists():
        again = json.loads(again_path.read_text())
        run["remeasure"] = {
            k: again[k]
            for k in (
                "roles",
                "winner_is_grid_best",
                "winner_is_as_written",
                "baseline_breaks_the_bound",
                "figures",
                "medians",
                "spreads",
                "feasible",
                "winner_over_grid_best",
                "winner_over_grid_best_note",
                "winner_gain_over_baseline",
                "grid_best_gain_over_baseline",
                "wall_s",
            )
        }
        run["remeasure"]["slots"] = [
            {"round": s["round"], "knobs": s["knobs"], "figure": r3(s["figure"]), "seconds": s["seconds"]}
            for s in again["slots"]
        ]
    run["tune_wall_over_grid_wall"] = round(tune["wall_s"] / grid_wall, 3)
    return run


def one_space(folder: Path, space_id: str) -> dict | None:
    rows = read_rows(folder / f"grid{space_id}.jsonl")
    if not rows:
        return None
    summary = json.loads((folder / f"grid{space_id}-summary.json").read_text())
    goal = goal_of(space_id, folder)
    best, judged = grid_best(rows, goal)
    return {
        "goal": str(goal),
        "space": {k: list(v) for k, v in SPACES[space_id].items()},
        "floor": summary.get("floor"),
        "baseline": summary["baseline"],
        "trained_context": summary.get("trained_context"),  # the synthetic GGUF's (recorded since space 3)
        "grid": {"wall_s": summary["wall_s"], "cells": summary["cells"], "rows": grid_rows(rows, goal)},
        "grid_best": {"knobs": best, "figure": r3(judged.figure), "spread": r3(judged.spread, 4)},
        "runs": [run for r in "abc" if (run := one_run(folder, space_id, r, summary["wall_s"])) is not None],
    }


def main() -> None:
    args = sys.argv[1:]
    folder = Path(args[0])
    kept = json.loads(Path(args[args.index("--keep") + 1]).read_text()) if "--keep" in args else {}
    server = (
        args[args.index("--server") + 1]
        if "--server" in args
        else "native llama-server (kimik3's rendered cmake args, sm_90)"
    )
    settings = next(json.loads(p.read_text())["settings"] for p in sorted(folder.glob("grid*-summary.json")))
    if kept and kept["bench"] != settings:  # a kept space's figures are comparable only under the same benches
        sys.exit(f"--keep: its bench settings {kept['bench']} differ from this folder's {settings}")
    # spaces 1 and 2 (2026-12-03) were served by a native build on the H200 (tests/fixtures/h200/build.txt)
    spaces = {
        sid: {"llama_server": "native llama-server (kimik3's rendered cmake args, sm_90)", **kept_space}
        for sid, kept_space in kept.get("spaces", {}).items()
    }
    for sid in SPACES:
        if (s := one_space(folder, sid)) is not None:
            spaces[sid] = {**s, "llama_server": server, "date": date_of(folder, sid)}
    if "--grid-again" in args:  # SPACE:DIR: the same space's grid measured again on a fresh machine (its best's draw)
        sid, _, again = args[args.index("--grid-again") + 1].partition(":")
        spaces[sid]["grid_again"] = grid_again(Path(again), sid)
    print(
        json.dumps(
            {
                "what": "kimik3 tune vs the exhaustive grid, three spaces, three independent tune runs each with its "
                "alternating re-measure; llama-server with kimik3's rendered argv, natively on the lent H200; "
                "tools/gpu_proof/run-tune.sh, folded by tune_fixture.py",
                "host": "1x NVIDIA H200, 16 cores; llama.cpp b11434 built with kimik3's cmake args (sm_90); which build "
                "served a space: its llama_server",
                "model": {"file": "K3-synth.gguf", "layers": 24, "moe_layers": 23, "experts": 64},
                "page_cache": "warm: the GGUF is read once before the first load; every load is warm",
                "profile": PROFILE,
                "bench": settings,
                "grid_bench": "every grid cell: a launch, a warm-up not counted, `repeats` benches of long_requests; judged "
                "as tune judges (the median figure, ranked by the mean log, infeasible if any draw broke a bound)",
                "spaces": {sid: spaces[sid] for sid in sorted(spaces)},
            },
            indent=1,
        )
    )


def grid_again(folder: Path, space_id: str) -> dict:
    """A second exhaustive grid of one space (another machine, another day or hour): its own floor, rows and best."""
    rows = read_rows(folder / f"grid{space_id}.jsonl")
    summary = json.loads((folder / f"grid{space_id}-summary.json").read_text())
    goal = goal_of(space_id, folder)
    best, judged = grid_best(rows, goal)
    return {
        "goal": str(goal),
        "floor": summary.get("floor"),
        "date": date_of(folder, space_id),
        "wall_s": summary["wall_s"],
        "cells": summary["cells"],
        "rows": grid_rows(rows, goal),
        "grid_best": {"knobs": best, "figure": r3(judged.figure), "spread": r3(judged.spread, 4)},
    }


def date_of(folder: Path, space_id: str) -> str:
    """The day the space's grid was measured (its summary file's time, UTC)."""
    stamp = (folder / f"grid{space_id}-summary.json").stat().st_mtime
    return datetime.fromtimestamp(stamp, tz=UTC).date().isoformat()


if __name__ == "__main__":
    main()
