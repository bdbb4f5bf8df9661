"""Fold the files run-tune.sh brought back (grid.jsonl, grid-summary.json, tune.json and remeasure.json of each
pass) into the fixture tests/fixtures/h200/tune-vs-grid.json, with the ratios the closing note reports: the
raw ones (each search's own figures, one median-of-3 each) and the re-measured ones (medians of the
alternating fresh launches of one run, the comparison the criterion means).

    python3 tools/gpu_proof/tune_fixture.py PASS_DIR... > tests/fixtures/h200/tune-vs-grid.json

tests/unit/test_tune_vs_grid.py recomputes every ratio from the rows kept here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tune_vs_grid import GOAL, PROFILE, SPACE  # noqa: E402


def knob_id(knobs: dict) -> str:
    return json.dumps(knobs, sort_keys=True)


def ratios(grid_rows: list[dict], grid_wall: float, tune: dict) -> dict:
    """What the report states for one pass (see the unit test for the same arithmetic)."""
    by = {knob_id(r["knobs"]): r["figure"] for r in grid_rows}
    best = max(grid_rows, key=lambda r: r["figure"])
    return {
        "grid_best": best["knobs"], "grid_best_figure": round(best["figure"], 2),
        "tune_winner": tune["winner"], "tune_winner_figure": round(tune["winner_figure"], 2),
        "winner_is_grid_best": knob_id(tune["winner"]) == knob_id(best["knobs"]),
        "winner_figure_over_grid_best": round(tune["winner_figure"] / best["figure"], 3),
        "grid_figure_of_winner_over_grid_best": round(by[knob_id(tune["winner"])] / best["figure"], 3),
        "tune_wall_over_grid_wall": round(tune["wall_s"] / grid_wall, 3),
        "winner_gain_over_baseline": round(tune["winner_figure"] / tune["baseline_figure"], 3),
        "grid_gain_of_winner_over_baseline": round(by[knob_id(tune["winner"])] / by[knob_id(tune["baseline"])], 3),
    }


def one_pass(folder: Path) -> dict:
    rows = [json.loads(line) for line in (folder / "grid.jsonl").read_text().splitlines() if line.strip()]
    summary = json.loads((folder / "grid-summary.json").read_text())
    tune = json.loads((folder / "tune.json").read_text())
    grid_rows = [{"knobs": r["knobs"], "status": r["status"], "figure": round(r["figure"], 2),
                  "figures": [round(f, 2) for f in r.get("figures", [])],
                  "seconds": r["seconds"], "ttft_p95": round(r["level"]["ttft_p95"], 3),
                  "decode_disagreement": round(r["level"]["decode_disagreement"], 4),
                  "metrics_disagreement": r["level"]["metrics_disagreement"]} for r in rows]
    trials = [{k: t.get(k) for k in ("knobs", "stage", "status", "figure", "figures", "ttft_p95", "seconds")}
              for t in tune["trials"]]
    for t in trials:
        t["figure"] = round(t["figure"], 2) if t["figure"] is not None else None
        t["figures"] = [round(f, 2) if f is not None else None for f in t["figures"] or []]
        t["ttft_p95"] = round(t["ttft_p95"], 3) if t["ttft_p95"] is not None else None
    baseline2 = next(t for t in trials if t["stage"] == 2 and knob_id(t["knobs"]) == knob_id(tune["baseline"]))
    tune_out = {"wall_s": tune["wall_s"], "predicted_s": round(tune["predicted_s"], 1), "winner": tune["winner"],
                "winner_figure": round(tune["winner_figure"], 2), "baseline": tune["baseline"],
                "baseline_figure": baseline2["figure"], "loads": len(tune["loads"]),
                "finalists": tune["finalists"], "max_trials": tune["max_trials"], "trials": trials}
    out = {"grid": {"wall_s": summary["wall_s"], "loads": len(summary["loads"]), "rows": grid_rows},
           "tune": tune_out, "ratios": ratios(grid_rows, summary["wall_s"], tune_out)}
    if (folder / "remeasure.json").exists():
        again = json.loads((folder / "remeasure.json").read_text())
        out["remeasure"] = {k: again[k] for k in ("roles", "winner_is_grid_best", "figures", "medians",
                                                  "winner_over_grid_best", "winner_over_grid_best_note",
                                                  "winner_gain_over_baseline", "grid_best_gain_over_baseline",
                                                  "wall_s")}
        out["remeasure"]["slots"] = [{"round": s["round"], "knobs": s["knobs"], "figure": round(s["figure"], 2),
                                      "seconds": s["seconds"]} for s in again["slots"]]
    return out


def main() -> None:
    passes = [one_pass(Path(p)) for p in sys.argv[1:]]
    settings = json.loads((Path(sys.argv[1]) / "tune.json").read_text())["settings"]
    print(json.dumps({
        "what": "kimik3 tune vs the exhaustive grid, same space and goal, native llama-server (kimik3's rendered "
                "argv) on the lent H200; tools/gpu_proof/run-tune.sh, folded by tune_fixture.py",
        "host": "1x NVIDIA H200 (143156 MiB free), 16 cores; llama.cpp b11434 built with kimik3's cmake args (sm_90)",
        "model": {"file": "K3-synth.gguf", "bytes": 2381885504, "layers": 24, "moe_layers": 23, "experts": 64},
        "page_cache": "warm: the GGUF is read once before the first load; every load of every pass is warm",
        "profile": PROFILE, "goal": GOAL, "space": {k: list(v) for k, v in SPACE.items()}, "bench": settings,
        "grid_bench": "every grid cell is measured as tune measures a finalist: a launch, a warm-up not counted, "
                      "`repeats` benches of long_requests, the median draw",
        "passes": passes,
    }, indent=1))


if __name__ == "__main__":
    main()
