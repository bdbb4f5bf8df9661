"""`kimik3 tune` against the exhaustive grid on a GPU host without Docker (issue 16): the same space, the
same goal, every candidate a real native launch of kimik3's rendered argv (native_runner.NativeRunner).

    python3 tools/gpu_proof/tune_vs_grid.py MODEL.gguf LLAMA_BIN_DIR OUT_DIR grid|tune|remeasure

grid: every launchable candidate of SPACE in page-cache order, each measured exactly as tune measures a
finalist (launch, warm-up not counted, REPEATS benches, the median draw): the grid's answer is as reliable as
tune's, and only the search differs. One JSON line each in OUT_DIR/grid.jsonl, which a later call resumes
(the grid's wall time is the sum of its rows: load, verify, warm-up and benches of each).
tune: the profile as written is loaded (the host's starting point), then `Search` runs exactly as
`kimik3 tune` runs it; OUT_DIR/tune.json holds every trial, the winner and the wall time.
remeasure: the grid's best, tune's winner and the profile as written measured again in ONE run, alternating
(A B C A B C ..., ROUNDS each; every slot a fresh launch, the warm-up, one bench): OUT_DIR/remeasure.json, with
the ratio of medians. When the winner is the grid's best, winner/grid-best is 1 by construction (it says so)
and the alternation still measures the gain over the profile as written.
TUNE_CPU=1: a dry run on a CPU llama-server (the host's GPUs read from tests/fixtures/h200/nvml.json; the
rendered argv names no device, and a CPU build takes -ngl and --n-cpu-moe); TUNE_FAST=1 shrinks the benches and the space.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from native_runner import NativeRunner  # noqa: E402

from kimik3_reconciler.adapters.host_linux import LinuxHost  # noqa: E402
from kimik3_reconciler.adapters.state_files import StateFiles, SystemClock  # noqa: E402
from kimik3_reconciler.model.bench import BenchSettings  # noqa: E402
from kimik3_reconciler.model.facts import LocalInputs, ModelFact, Observed, RemoteFile  # noqa: E402
from kimik3_reconciler.model.gguf_header import parse_gguf_header, summarize  # noqa: E402
from kimik3_reconciler.model.profile_source import parse_profile  # noqa: E402
from kimik3_reconciler.model.tuning import candidates, parse_goal, search_key, trials_to_json  # noqa: E402
from kimik3_reconciler.observe.host import collect_host  # noqa: E402
from kimik3_reconciler.planning.tune_space import check_candidate, placement_key  # noqa: E402
from kimik3_reconciler.tuning import Search, median_draw, warm_up_settings, with_settings  # noqa: E402

REV = "d3e0c0de" * 5
# A hybrid profile as a user would write it: a manual split, the rest left to kimik3's defaults.
PROFILE = f"""apiVersion: kimik3/v1
name: k3-tune-proof
model:
  repo: kimik3-demo/Kimi-K3-tiny-GGUF
  revision: {REV}
  quant: UD-SYNTH
  cache_dir: /models-cache
build: {{source: mainline, variant: cuda, cuda_architectures: ["90"], cpu_features: auto}}
gpus: [0]
serve:
  host: loopback
  port: 18197
  ctx_size: 8192
  parallel: 4
  n_cpu_moe: 16
gate:
  smoke: false
"""
GOAL = "aggregate@4"
FAST = os.environ.get("TUNE_FAST") == "1"  # the CPU dry run: short prompts, a 2x2 space
SPACE = {"n_cpu_moe": (4, 16), "ubatch": (512, 4096)} if FAST else \
    {"n_cpu_moe": (4, 10, 16, 22), "ubatch": (512, 1024, 2048, 4096)}
PROMPT_TOKENS, OUTPUT_TOKENS = (128, 16) if FAST else (1024, 128)
# short (stage 1): one round at c4 (4 requests); long (a finalist's and a grid cell's bench): two rounds (8),
# REPEATS times, the median draw. ROUNDS: slots of each candidate in the alternating re-measure.
SHORT_PROMPTS, LONG_PROMPTS, REPEATS, ROUNDS = 1, 2, 3, 3
FINALISTS, MAX_TRIALS = 2, 4
CPU = os.environ.get("TUNE_CPU") == "1"
RECORDED_NVML = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "h200" / "nvml.json"


class NoDocker:
    def info(self) -> dict:
        return {"Runtimes": {"nvidia": {}}}


class RecordedGpuHost(LinuxHost):
    """The CPU dry run: this host's CPU and memory, the H200's NVML as recorded."""

    def nvml(self) -> dict:
        return json.loads(RECORDED_NVML.read_text())


def observe(model: Path) -> Observed:
    with open(model, "rb") as f:
        layout = summarize([parse_gguf_header(f.read(8 << 20))])
    files = (RemoteFile(path=f"UD-SYNTH/{model.name}", size=model.stat().st_size),)
    return Observed(host=collect_host(RecordedGpuHost() if CPU else LinuxHost(), NoDocker()), layout=layout,
                    inputs=LocalInputs(dockerfile_path="-", dockerfile_sha256="-"),
                    model=ModelFact(repo="kimik3-demo/Kimi-K3-tiny-GGUF", revision=REV, quant="UD-SYNTH",
                                    cache_dir="/models-cache", files=files))


def main() -> None:
    model, bindir, out, phase = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
    out.mkdir(parents=True, exist_ok=True)
    logs = Path("/tmp/tune-logs") / phase
    logs.mkdir(parents=True, exist_ok=True)
    loaded = parse_profile(PROFILE, source="k3-tune-proof.yaml")
    observed = observe(model)
    goal = parse_goal(GOAL)
    base = BenchSettings(prompt_tokens=PROMPT_TOKENS, output_tokens=OUTPUT_TOKENS)
    short, long = with_settings(base, goal, SHORT_PROMPTS, 1), with_settings(base, goal, LONG_PROMPTS, 1)
    state = StateFiles(Path("/tmp/tune-state") / phase)
    runner = NativeRunner(bindir, observed, state, logs)
    argv = runner.argv_for(loaded)
    baseline_knobs = {"n_cpu_moe": loaded.profile.serve.n_cpu_moe,
                      "ubatch": int(argv[argv.index("--ubatch-size") + 1])}
    print(f"{phase}: baseline {baseline_knobs}; argv {' '.join(argv)}", flush=True)
    slot_tokens = PROMPT_TOKENS + OUTPUT_TOKENS
    settings = {"prompt_tokens": PROMPT_TOKENS, "output_tokens": OUTPUT_TOKENS, "short_requests": short.requests(),
                "long_requests": long.requests(), "repeats": REPEATS, "rounds": ROUNDS,
                "warm_up_requests": warm_up_settings(short).requests(),
                "warm_up_output_tokens": warm_up_settings(short).output_tokens}
    started = time.monotonic()
    try:
        if phase == "grid":
            grid(runner, loaded, observed, goal, short, long, slot_tokens, out / "grid.jsonl")
            rows = [json.loads(line) for line in (out / "grid.jsonl").read_text().splitlines() if line.strip()]
            (out / "grid-summary.json").write_text(json.dumps(
                {"wall_s": round(sum(r["seconds"] for r in rows), 2), "loads": runner.loads, "baseline": baseline_knobs,
                 "settings": settings}, indent=1))
        elif phase == "tune":
            runner.converge(loaded)  # the host starts on the profile as written (a load, counted)
            key = search_key(loaded.profile.name, loaded.text, goal, SPACE,
                             {"short": short.requests(), "long": long.requests(), "repeats": REPEATS})
            search = Search(runner, state, SystemClock(), lambda s: print(s, flush=True), loaded, goal, SPACE,
                            short, long, key, 3600.0, FINALISTS, MAX_TRIALS, REPEATS)
            result = search.run(observed, baseline_knobs)
            runner.settle(result.winner_loaded or loaded)
            wall = time.monotonic() - started
            (out / "tune.json").write_text(json.dumps({
                "wall_s": round(wall, 2), "winner": result.winner.knobs if result.winner else None,
                "winner_figure": result.winner.figure if result.winner else None,
                "baseline": baseline_knobs, "baseline_figure": result.baseline.figure if result.baseline else None,
                "baseline_stage2_figure": next((t.figure for t in result.trials if t.stage == 2
                                                and t.knobs == baseline_knobs), None),
                "predicted_s": result.predicted_s, "trials": trials_to_json(result.trials), "loads": runner.loads,
                "finalists": FINALISTS, "max_trials": MAX_TRIALS, "settings": settings}, indent=1))
            print(f"tune wall {wall:.1f} s; winner {result.winner.knobs if result.winner else None}", flush=True)
        else:
            remeasure(runner, loaded, observed, goal, short, long, slot_tokens, out, baseline_knobs)
    finally:
        runner.stop()


def cell(runner: NativeRunner, loaded, goal, short, long) -> dict:  # noqa: ANN001
    """One candidate measured as tune measures a finalist: launch, warm-up (not counted), REPEATS benches,
    the median draw."""
    runner.converge(loaded)
    runner.warm_up(loaded, warm_up_settings(short))
    draws = [runner.measure(loaded, long) for _ in range(REPEATS)]
    levels = [(run.level(goal.concurrency), key) for run, key in draws]
    level, _ = median_draw(levels, goal.score)
    return {"status": "ok", "figure": goal.figure(level), "figures": [goal.figure(lv) for lv, _ in levels],
            "level": level.to_json() if level else None}


def grid(runner: NativeRunner, loaded, observed, goal, short, long, slot_tokens, path: Path) -> None:  # noqa: ANN001
    done = {json.dumps(json.loads(line)["knobs"], sort_keys=True) for line in path.read_text().splitlines()
            if line.strip()} if path.exists() else set()
    with open(path, "a") as sink:  # resumable across calls: rows already measured are kept, not rerun
        for knobs in sorted(candidates(SPACE), key=placement_key):
            if json.dumps(knobs, sort_keys=True) in done:
                continue
            verdict = check_candidate(loaded.text, loaded.profile, knobs, observed, slot_tokens)
            row: dict = {"knobs": knobs}
            t0 = time.monotonic()
            if verdict.loaded is None:
                row.update(status="refused", detail=verdict.refusal)
            else:
                try:
                    row.update(cell(runner, verdict.loaded, goal, short, long))
                except Exception as exc:  # noqa: BLE001 - a failed candidate is a row of the grid
                    row.update(status="failed", detail=str(exc)[:300])
            row["seconds"] = round(time.monotonic() - t0, 2)
            print(json.dumps({k: v for k, v in row.items() if k != "level"}), flush=True)
            sink.write(json.dumps(row) + "\n")
            sink.flush()


def remeasure(runner: NativeRunner, loaded, observed, goal, short, long, slot_tokens, out: Path,  # noqa: ANN001
              baseline: dict) -> None:
    """The grid's best, tune's winner and the profile as written, alternating in one run: each slot a fresh
    launch (the server is stopped first even when the argv is the same), the warm-up, one long bench."""
    rows = [json.loads(line) for line in (out / "grid.jsonl").read_text().splitlines() if line.strip()]
    best = max((r for r in rows if r.get("figure") is not None), key=lambda r: r["figure"])["knobs"]
    tune = json.loads((out / "tune.json").read_text())
    winner = tune["winner"] or baseline  # no winner: tune kept the profile as written
    roles = {"grid_best": best, "tune_winner": winner, "baseline": baseline}
    distinct: list[dict] = []
    for knobs in roles.values():
        if knobs not in distinct:
            distinct.append(knobs)
    profiles = {}
    for knobs in distinct:
        verdict = check_candidate(loaded.text, loaded.profile, knobs, observed, slot_tokens)
        assert verdict.loaded is not None, f"{knobs}: {verdict.refusal}"
        profiles[json.dumps(knobs, sort_keys=True)] = verdict.loaded
    slots: list[dict] = []
    path = out / "remeasure.json"
    for round_ in range(ROUNDS):
        for knobs in distinct:
            kid = json.dumps(knobs, sort_keys=True)
            t0 = time.monotonic()
            runner.stop()  # a fresh launch every slot: load-to-load variation is part of what is compared
            runner.converge(profiles[kid])
            runner.warm_up(profiles[kid], warm_up_settings(short))
            run, _ = runner.measure(profiles[kid], long)
            level = run.level(goal.concurrency)
            slots.append({"round": round_, "knobs": knobs, "figure": goal.figure(level),
                          "ttft_p95": level.ttft_p95 if level else None, "seconds": round(time.monotonic() - t0, 2)})
            print(json.dumps(slots[-1]), flush=True)
            path.write_text(json.dumps(summary(roles, slots), indent=1))  # kept after every slot (CALL_LIMIT)


def summary(roles: dict, slots: list[dict]) -> dict:
    """Per role: the figures of its slots and their median; the ratios the criterion names."""
    def figures(knobs: dict) -> list[float]:
        return [s["figure"] for s in slots if s["knobs"] == knobs and s["figure"] is not None]

    medians = {role: (statistics.median(figures(k)) if figures(k) else None) for role, k in roles.items()}
    same = roles["tune_winner"] == roles["grid_best"]

    def ratio(a: str, b: str) -> float | None:
        return round(medians[a] / medians[b], 3) if medians[a] and medians[b] else None

    return {"roles": roles, "winner_is_grid_best": same,
            "figures": {role: figures(k) for role, k in roles.items()}, "medians": medians,
            "winner_over_grid_best": ratio("tune_winner", "grid_best"),
            "winner_over_grid_best_note": "the same knobs: 1 by construction" if same else
            "medians of alternating fresh launches in one run",
            "winner_gain_over_baseline": ratio("tune_winner", "baseline"),
            "grid_best_gain_over_baseline": ratio("grid_best", "baseline"), "slots": slots,
            "wall_s": round(sum(s["seconds"] for s in slots), 2)}


if __name__ == "__main__":
    main()
