"""`kimik3 tune` against the exhaustive grid on a GPU host without Docker (issue 16): the same space, the
same goal, every candidate a real native launch of kimik3's rendered argv (native_runner.NativeRunner).

    python3 tools/gpu_proof/tune_vs_grid.py MODEL.gguf LLAMA_BIN_DIR OUT_DIR grid|tune

grid: every launchable candidate of SPACE in page-cache order, each measured with the bench tune gives its
finalists (the grid's answer is then as reliable as tune's); one JSON line each in OUT_DIR/grid.jsonl, which
a later call resumes (the grid's wall time is the sum of its rows: load, verify and bench of each).
tune: the profile as written is loaded (the host's starting point), then `Search` runs exactly as
`kimik3 tune` runs it; OUT_DIR/tune.json holds every trial, the winner and the wall time.
"""

from __future__ import annotations

import json
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
from kimik3_reconciler.tuning import Search, with_settings  # noqa: E402

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
SPACE = {"n_cpu_moe": (4, 10, 16, 22), "ubatch": (512, 1024, 2048, 4096)}
PROMPT_TOKENS, OUTPUT_TOKENS, PROMPTS = 1024, 128, 2  # tune's --prompts (short bench; finalists get 4x)
FINALISTS, MAX_TRIALS = 2, 5


class NoDocker:
    def info(self) -> dict:
        return {"Runtimes": {"nvidia": {}}}


def observe(model: Path) -> Observed:
    with open(model, "rb") as f:
        layout = summarize([parse_gguf_header(f.read(8 << 20))])
    files = (RemoteFile(path=f"UD-SYNTH/{model.name}", size=model.stat().st_size),)
    return Observed(host=collect_host(LinuxHost(), NoDocker()), layout=layout,
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
    short, long = with_settings(base, goal, PROMPTS, 1), with_settings(base, goal, PROMPTS * 2, 2)
    state = StateFiles(Path("/tmp/tune-state") / phase)
    runner = NativeRunner(bindir, observed, state, logs)
    argv = runner.argv_for(loaded)
    baseline_knobs = {"n_cpu_moe": loaded.profile.serve.n_cpu_moe,
                      "ubatch": int(argv[argv.index("--ubatch-size") + 1])}
    print(f"{phase}: baseline {baseline_knobs}; argv {' '.join(argv)}", flush=True)
    slot_tokens = PROMPT_TOKENS + OUTPUT_TOKENS
    started = time.monotonic()
    try:
        if phase == "grid":
            grid(runner, loaded, observed, goal, long, slot_tokens, out / "grid.jsonl")
            rows = [json.loads(line) for line in (out / "grid.jsonl").read_text().splitlines() if line.strip()]
            (out / "grid-summary.json").write_text(json.dumps(
                {"wall_s": round(sum(r["seconds"] for r in rows), 2), "loads": runner.loads, "baseline": baseline_knobs,
                 "settings": {"prompt_tokens": PROMPT_TOKENS, "output_tokens": OUTPUT_TOKENS,
                              "requests": long.requests()}}, indent=1))
        else:
            runner.converge(loaded)  # the host starts on the profile as written (a load, counted)
            key = search_key(loaded.profile.name, loaded.text, goal, SPACE,
                             {"short": short.requests(), "long": long.requests()})
            search = Search(runner, state, SystemClock(), lambda s: print(s, flush=True), loaded, goal, SPACE,
                            short, long, key, 3600.0, FINALISTS, MAX_TRIALS)
            result = search.run(observed, baseline_knobs)
            runner.settle(result.winner_loaded or loaded)
            wall = time.monotonic() - started
            (out / "tune.json").write_text(json.dumps({
                "wall_s": round(wall, 2), "winner": result.winner.knobs if result.winner else None,
                "winner_figure": result.winner.figure if result.winner else None,
                "baseline": baseline_knobs, "baseline_figure": result.baseline.figure if result.baseline else None,
                "predicted_s": result.predicted_s, "trials": trials_to_json(result.trials), "loads": runner.loads,
                "finalists": FINALISTS, "max_trials": MAX_TRIALS,
                "settings": {"prompt_tokens": PROMPT_TOKENS, "output_tokens": OUTPUT_TOKENS,
                             "short_requests": short.requests(), "long_requests": long.requests()}}, indent=1))
            print(f"tune wall {wall:.1f} s; winner {result.winner.knobs if result.winner else None}", flush=True)
    finally:
        runner.stop()


def grid(runner: NativeRunner, loaded, observed, goal, settings, slot_tokens, path: Path) -> None:  # noqa: ANN001
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
                    runner.converge(verdict.loaded)
                    run, _ = runner.measure(verdict.loaded, settings)
                except Exception as exc:  # noqa: BLE001 - a failed candidate is a row of the grid
                    row.update(status="failed", detail=str(exc)[:300])
                else:
                    level = run.level(goal.concurrency)
                    row.update(status="ok", figure=goal.figure(level), level=level.to_json() if level else None)
            row["seconds"] = round(time.monotonic() - t0, 2)
            print(json.dumps({k: v for k, v in row.items() if k != "level"}), flush=True)
            sink.write(json.dumps(row) + "\n")
            sink.flush()


if __name__ == "__main__":
    main()
