"""`kimik3 tune`: the search under the host lock, its table, and the profile rewritten (--write) or the diff."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from kimik3_reconciler.adapters.atomic_files import write_atomically
from kimik3_reconciler.cli import _ctx, _err, _fail, _out, _run
from kimik3_reconciler.cli.inputs import load
from kimik3_reconciler.cli.options import Duration, lock_timeout
from kimik3_reconciler.errors import InputError
from kimik3_reconciler.model.bench import BenchSettings
from kimik3_reconciler.model.tuning import FIT


def _baseline_knobs(space: dict, observed) -> dict:  # noqa: ANN001 - Observed
    """The running (as written) value of each searched knob: the trial that needs no load."""
    running = observed.container.inputs if observed.container else {}
    fixed = {"threads": observed.host.physical_cores, "load_mode": running.get("serve.load_mode") or "none"}
    knobs = {k: fixed[k] if k in fixed else running.get(f"serve.{k}") for k in space}
    if "n_cpu_moe" in knobs and knobs["n_cpu_moe"] is None:
        knobs["n_cpu_moe"] = FIT  # the running profile leaves the split to --fit
    return knobs


def write_target(file: str) -> Path:
    """The file `--write` will rewrite, checked before the search (hours) rather than at its end: the profile itself
    (a symlink's target: replacing the link would cut a GitOps checkout's file off from its repo), a regular file
    in a folder this user can write. Was: `tune /dev/stdin --write` or a read-only checkout searched for hours and
    then failed to write the winner."""
    path = Path(file).resolve()
    if not path.is_file():
        raise InputError(f"--write: {file} is not a regular file ({path}): tune rewrites FILE in place; give the "
                         "profile's own path, or leave out --write to get the diff")
    for needed in (path.parent, path):
        if not os.access(needed, os.W_OK):
            raise InputError(f"--write: {needed} is not writable by this user: tune could not rewrite {file} "
                             "after the search; fix the permission, or leave out --write to get the diff")
    return path


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, exists=True))
@click.option("--goal", "goal_text", required=True,
              help="decode[@1] | aggregate@N | ttft-p95@N, optionally ',ttft-p95<=SECONDS' and/or ',decode>=TOK_S' "
                   "(aggregate@8,ttft-p95<=2.5; ttft-p95@4,decode>=40)")
@click.option("--budget", type=Duration(minimum=1.0), default="2h", show_default=True,
              help="no new launch once the search has run this long")
@click.option("--space", multiple=True, metavar="KNOB=V1,V2",
              help="search these values of a knob (repeatable); default: the profile's knobs for this host")
@click.option("--prompts", type=click.IntRange(min=1), default=2, show_default=True,
              help="requests per concurrent stream in the warm-up's sizing; every draw's bench sends twice as many")
@click.option("--prompt-tokens", type=click.IntRange(min=1), default=256, show_default=True)
@click.option("--output-tokens", type=click.IntRange(min=2), default=64, show_default=True)
@click.option("--finalists", type=click.IntRange(min=1), default=2, show_default=True,
              help="the best this many (the leader among them) and FILE as written go to the final rounds")
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True,
              help="draws a candidate gets at most in the final rounds (each a relaunch, a warm-up and a bench); "
                   "the rounds stop earlier once the candidates are told apart")
@click.option("--max-trials", type=click.IntRange(min=1), default=None,
              help="draws of the search stage at most, before the final rounds (default: what the space needs: the "
                   "split, each value of each other knob, one neighbour split)")
@click.option("--write", is_flag=True, help="rewrite FILE's knobs in place (comments and key order kept) with the "
                                            "measured figures as a comment, and converge on it; without: print the diff")
@click.option("--json", "json_out", is_flag=True, help="print the trials, the winner and the diff as JSON on stdout")
@lock_timeout
@click.pass_context
@_run
def tune(ctx: click.Context, file: str, goal_text: str, budget: float, space: tuple[str, ...], prompts: int,
         prompt_tokens: int, output_tokens: int, finalists: int, repeats: int, max_trials: int | None, write: bool,
         json_out: bool, lock_timeout: float) -> None:
    """Find the profile's fastest knobs on this host for a goal: every candidate is a real launch
    (replace, health, verify) and a bench; refused candidates are never launched. Writes back only what is
    measurably better than FILE as written (inside the noise FILE is kept, and tune says so). Resumable
    (state), holds the host lock, and always ends converged on the winner (--write) or on FILE as written."""
    from kimik3_reconciler.benchmark import converged_deployment
    from kimik3_reconciler.model.profile_edit import set_serve_knobs
    from kimik3_reconciler.model.profile_source import parse_profile
    from kimik3_reconciler.model.tuning import parse_goal, parse_space, search_key
    from kimik3_reconciler.planning.tune_space import default_space, serve_values
    from kimik3_reconciler.tuning import DockerRunner, Search, with_settings

    target_file = write_target(file) if write else None
    loaded = load(file)
    goal, asked = parse_goal(goal_text), parse_space(space)
    engine = _ctx(ctx, json_out).engine(file)
    base = BenchSettings(prompt_tokens=prompt_tokens, output_tokens=output_tokens)
    short, long = with_settings(base, goal, prompts, 1), with_settings(base, goal, prompts * 2, 1)
    key = search_key(loaded.profile.name, loaded.text, goal, asked,
                     {"short": short.requests(), "long": long.requests(), "repeats": repeats,
                      "tokens": [prompt_tokens, output_tokens], "search": 2})
    runner = DockerRunner(engine)
    with engine.locked("tune", loaded.profile, lock_timeout):
        record = engine.ports.state.read(key) or {}
        if record.get("trials"):  # a killed search: the host may be on one of its candidates
            observed = engine.observe(loaded)
            the_space = {k: tuple(v) for k, v in record["space"].items()}
            baseline_knobs = record["baseline"]
        else:
            observed = converged_deployment(engine, loaded)  # refuses (exit 4) unless converged on FILE
            the_space = asked or default_space(loaded.profile, observed)
            baseline_knobs = _baseline_knobs(the_space, observed)
            engine.ports.state.write(key, {"space": {k: list(v) for k, v in the_space.items()},
                                           "baseline": baseline_knobs, "file": str(Path(file).resolve())})
        _err.print(f"tune {loaded.profile.name} for {goal}: space "
                   + " ".join(f"{k}={','.join(map(str, v))}" for k, v in the_space.items()) + f" (state {key})")
        search = Search(runner, engine.ports.state, engine.ports.clock, _err.print, loaded, goal, the_space,
                        short, long, key, budget, finalists, max_trials, repeats)
        target, result = loaded, None
        try:
            result = search.run(observed, baseline_knobs)
            if write and result.winner is not None:
                note = (f"kimik3 tune {engine.ports.clock.now():%Y-%m-%d} ({goal}): "
                        f"{_figure(result.winner, goal)} measured, was {_figure(result.baseline, goal)} as written")
                new_text = set_serve_knobs(loaded.text, serve_values(loaded.profile, result.winner.knobs), note)
                # whole or not at all, keeping the profile's own mode (the shared writer's temp file is 0600); a
                # symlinked profile has its target rewritten (write_target), the link kept
                written = target_file or Path(file)  # target_file: set whenever write is
                write_atomically(written, new_text, mode=written.stat().st_mode & 0o7777, make_folder=False)
                target = parse_profile(new_text, source=file)
        finally:  # never left on a candidate: the winner (written) or FILE as it was
            _err.print(f"converging on {'the winner' if target is not loaded else file + ' as written'}")
            runner.settle(target)
    failure = _nothing_measured(result.trials, baseline_knobs)
    if json_out:
        # One document on stdout whatever happened: the trials, and the error too when nothing was measured
        # (printing the trials, then _run's error document, made stdout two documents no parser reads).
        _tune_json(file, goal, result, loaded, write, failure)
        if failure is not None:
            _fail(failure, False)  # the message on stderr and the exit code; the JSON is printed above
        return
    _out.print(_trial_table(result.trials, goal))
    _out.print(_standing_table(result.standings, goal))
    if failure is not None:
        raise failure
    if result.winner is None:
        _out.print(Text(f"nothing measurably better than {file} as written: no change ({result.verdict})"))
        return
    _out.print(Text(f"winner: {' '.join(f'{k}={v}' for k, v in sorted(result.winner.knobs.items()))}: "
                    f"{_figure(result.winner, goal)} against {_figure(result.baseline, goal)} as written"))
    if write:
        _out.print(f"{file} rewritten; the host runs it")
    else:
        proposed = set_serve_knobs(loaded.text, serve_values(loaded.profile, result.winner.knobs))
        diff = difflib.unified_diff(loaded.text.splitlines(True), proposed.splitlines(True), file, f"{file} (tuned)")
        _out.print(Text("".join(diff)))
        _out.print("the host runs FILE as written; `--write` applies the winner")


def _tune_json(file: str, goal, result, loaded, written: bool, failure=None) -> None:  # noqa: ANN001
    """--json: every trial, the baseline and the winner (None: nothing beat FILE as written), and the diff; with
    `failure` (NothingMeasured) the same document carries `ok: false` and the error, as every failing --json does."""
    import dataclasses
    import json

    from kimik3_reconciler.model.profile_edit import set_serve_knobs
    from kimik3_reconciler.planning.tune_space import serve_values

    def trial(t) -> dict | None:  # noqa: ANN001 - Trial | None
        return None if t is None else dataclasses.asdict(t)

    diff = ""
    if result.winner is not None and not written:
        text = loaded.text
        proposed = set_serve_knobs(text, serve_values(loaded.profile, result.winner.knobs))
        diff = "".join(difflib.unified_diff(text.splitlines(True), proposed.splitlines(True), file, f"{file} (tuned)"))
    from kimik3_reconciler.cli.json_out import kimik3_error_document

    document = {"profile_file": file, "goal": str(goal), "trials": [trial(t) for t in result.trials],
                "baseline": trial(result.baseline), "winner": trial(result.winner), "leader": trial(result.leader),
                "standings": [trial(s) for s in result.standings], "verdict": result.verdict,
                "noise": trial(result.noise) if result.noise is not None and result.noise.df else None,
                "written": written and result.winner is not None, "diff": diff}
    if failure is not None:
        document = {**kimik3_error_document(failure), **document}
    click.echo(json.dumps(document, indent=2, default=str))


def _nothing_measured(trials, baseline_knobs: dict):  # noqa: ANN001, ANN202 - list[Trial] -> NothingMeasured | None
    """The error (exit 1) when candidates were launched and none of them was measured: "nothing beat FILE" would
    hide a search that measured nothing (a broken build, a server that never comes up)."""
    from kimik3_reconciler.errors import NothingMeasured
    from kimik3_reconciler.model.tuning import knob_id

    launched = [t for t in trials if knob_id(t.knobs) != knob_id(baseline_knobs)]
    if launched and all(t.status == "failed" for t in launched):
        first = next(t.detail for t in launched)
        return NothingMeasured(f"every candidate tune launched failed ({len(launched)}; the first: {first}); "
                               "the host runs FILE as written")
    return None


def _figure(standing, goal) -> str:  # noqa: ANN001 - Standing | None, Goal
    from kimik3_reconciler.tuning.evidence import spread_said

    if standing is None or standing.figure is None:
        return "not measured"
    return f"{goal.metric}@{goal.concurrency} {standing.figure:.2f} {goal.unit} ({spread_said(standing)})"


def _standing_table(standings, goal) -> Table:  # noqa: ANN001 - list[Standing], Goal
    """Each candidate drawn: the median of its draws with the spread beside it (a figure without its spread
    is how the old search ranked noise)."""
    table = Table("knobs", f"{goal.metric}@{goal.concurrency} {goal.unit} (median)", "spread", "draws", "result",
                  title="candidates, best first")
    for s in standings:
        knobs = " ".join(f"{k}={v}" for k, v in sorted(s.knobs.items()))
        table.add_row(Text(knobs), "-" if s.figure is None else f"{s.figure:.2f}",
                      "-" if s.spread is None else f"±{s.spread * 100:.1f} %", str(s.draws),
                      Text("ok" if s.feasible else (s.detail or "failed")))
    return table


def _trial_table(trials, goal) -> Table:  # noqa: ANN001 - list[Trial], Goal
    table = Table("stage", "knobs", "result", f"{goal.metric}@{goal.concurrency} {goal.unit}", "TTFT p95 s",
                  "seconds", title=f"tune for {goal}")
    for t in trials:
        knobs = " ".join(f"{k}={v}" for k, v in sorted(t.knobs.items()))
        table.add_row(str(t.stage), Text(knobs), Text(t.status if not t.detail else f"{t.status}: {t.detail}"),
                      "-" if t.figure is None else f"{t.figure:.2f}",
                      "-" if t.ttft_p95 is None else f"{t.ttft_p95:.3f}", "-" if t.seconds is None else str(t.seconds))
    return table
