"""`kimik3 tune`: its options, the call (tuning/session.py runs the search under the host lock), its table, and
the profile rewritten (--write) or the diff."""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from kimik3_reconciler.adapters.atomic_files import write_atomically
from kimik3_reconciler.cli import _ctx, _err, _fail, _out, _run
from kimik3_reconciler.cli.inputs import load
from kimik3_reconciler.cli.options import count_option, duration_option, lock_timeout
from kimik3_reconciler.errors import InputError
from kimik3_reconciler.model.bench import BenchSettings


def write_target(file: str) -> Path:
    """The file `--write` will rewrite, checked before the search (hours) rather than at its end: the profile itself
    (a symlink's target: replacing the link would cut a GitOps checkout's file off from its repo), a regular file
    in a folder this user can write. Was: `tune /dev/stdin --write` or a read-only checkout searched for hours and
    then failed to write the winner."""
    path = Path(file).resolve()
    if not path.is_file():
        raise InputError(
            f"--write: {file} is not a regular file ({path}): tune rewrites FILE in place; give the "
            "profile's own path, or leave out --write to get the diff"
        )
    for needed in (path.parent, path):
        if not os.access(needed, os.W_OK):
            raise InputError(
                f"--write: {needed} is not writable by this user: tune could not rewrite {file} "
                "after the search; fix the permission, or leave out --write to get the diff"
            )
    return path


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, exists=True))
@click.option(
    "--goal",
    "goal_text",
    required=True,
    help="decode[@1] | aggregate@N | ttft-p95@N, optionally ',ttft-p95<=SECONDS' and/or ',decode>=TOK_S' "
    "(aggregate@8,ttft-p95<=2.5; ttft-p95@4,decode>=40)",
)
@duration_option("--budget", "2h", "no new launch once the search has run this long")
@click.option(
    "--space",
    multiple=True,
    metavar="KNOB=V1,V2",
    help="search these values of a knob (repeatable): a tune knob of the profile's engine, in its section (serve, "
    "vllm, sglang; another name is refused with the list); default: the profile's knobs for this host",
)
@count_option(
    "--prompts", 2, "requests per concurrent stream in the warm-up's sizing; every draw's bench sends twice as many"
)
@count_option("--prompt-tokens", 256)
@count_option("--output-tokens", 64, least=2)
@count_option("--finalists", 2, "the best this many (the leader among them) and FILE as written go to the final rounds")
@count_option(
    "--repeats",
    3,
    "draws a candidate gets at most in the final rounds (each a relaunch, a warm-up and a bench); "
    "the rounds stop earlier once the candidates are told apart",
)
@click.option(
    "--max-trials",
    type=click.IntRange(min=1),
    default=None,
    help="draws of the search stage at most, before the final rounds (default: what the space needs: the "
    "split, each value of each other knob, one neighbour split)",
)
@click.option(
    "--write",
    is_flag=True,
    help="rewrite FILE's knobs in place (comments and key order kept) with the "
    "measured figures as a comment, and converge on it; without: print the diff",
)
@click.option("--json", "json_out", is_flag=True, help="print the trials, the winner and the diff as JSON on stdout")
@lock_timeout
@click.pass_context
@_run
def tune(
    ctx: click.Context,
    file: str,
    goal_text: str,
    budget: float,
    space: tuple[str, ...],
    prompts: int,
    prompt_tokens: int,
    output_tokens: int,
    finalists: int,
    repeats: int,
    max_trials: int | None,
    write: bool,
    json_out: bool,
    lock_timeout: float,
) -> None:
    """Find the profile's fastest knobs on this host for a goal: every candidate is a real launch
    (replace, health, verify) and a bench; refused candidates are never launched. Writes back only what is
    measurably better than FILE as written (inside the noise FILE is kept, and tune says so). Resumable
    (state), holds the host lock, and always ends converged on the winner (--write) or on FILE as written."""
    from kimik3_reconciler.engines import engine_for
    from kimik3_reconciler.model.tuning import parse_goal, parse_space
    from kimik3_reconciler.tuning import DockerRunner
    from kimik3_reconciler.tuning.session import TuneRequest, figure, proposed_text
    from kimik3_reconciler.tuning.session import tune as run_tune

    target_file = write_target(file) if write else None
    loaded = load(file)
    goal = parse_goal(goal_text)
    knobs = engine_for(loaded.profile.engine).tune_knobs  # --space names the engine's knobs (vllm: its section's)
    request = TuneRequest(
        goal,
        parse_space(space, knobs),
        BenchSettings(prompt_tokens=prompt_tokens, output_tokens=output_tokens),
        prompts,
        budget,
        finalists,
        max_trials,
        repeats,
        lock_timeout,
    )
    orchestrator = _ctx(ctx, json_out).orchestrator(file)
    outcome = run_tune(
        orchestrator,
        DockerRunner(orchestrator),
        loaded,
        file,
        request,
        _err.print,
        None if target_file is None else _profile_writer(target_file),
    )
    result, failure = outcome.result, outcome.failure
    diff = ""
    if result.winner is not None and not write:
        proposed = proposed_text(loaded, result.winner.knobs)
        diff = "".join(
            difflib.unified_diff(loaded.text.splitlines(True), proposed.splitlines(True), file, f"{file} (tuned)")
        )
    if json_out:
        # One document on stdout whatever happened: the trials, and the error too when nothing was measured
        # (printing the trials, then _run's error document, made stdout two documents no parser reads).
        _tune_json(file, goal, result, write, diff, failure)
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
    _out.print(
        Text(
            f"winner: {' '.join(f'{k}={v}' for k, v in sorted(result.winner.knobs.items()))}: "
            f"{figure(result.winner, goal)} against {figure(result.baseline, goal)} as written"
        )
    )
    if write:
        _out.print(f"{file} rewritten; the host runs it")
    else:
        _out.print(Text(diff))
        _out.print("the host runs FILE as written; `--write` applies the winner")


def _profile_writer(path: Path) -> Callable[[str], None]:
    """--write: the tuned text replaces `path` whole or not at all, keeping the profile's own mode (the shared
    writer's temp file is 0600); a symlinked profile has its target rewritten (write_target), the link kept."""

    def write(text: str) -> None:
        write_atomically(path, text, mode=path.stat().st_mode & 0o7777, make_folder=False)

    return write


def _tune_json(file: str, goal, result, written: bool, diff: str, failure=None) -> None:  # noqa: ANN001
    """--json: every trial, the baseline and the winner (None: nothing beat FILE as written), and the diff; with
    `failure` (NothingMeasured) the same document carries `ok: false` and the error, as every failing --json does."""
    import dataclasses
    import json

    from kimik3_reconciler.cli.json_out import kimik3_error_document

    def trial(t) -> dict | None:  # noqa: ANN001 - Trial | None
        return None if t is None else dataclasses.asdict(t)

    document = {
        "profile_file": file,
        "goal": str(goal),
        "trials": [trial(t) for t in result.trials],
        "baseline": trial(result.baseline),
        "winner": trial(result.winner),
        "leader": trial(result.leader),
        "standings": [trial(s) for s in result.standings],
        "verdict": result.verdict,
        "noise": trial(result.noise) if result.noise is not None and result.noise.df else None,
        "predicted_s": round(result.predicted_s, 1),
        "written": written and result.winner is not None,
        "diff": diff,
    }
    if failure is not None:
        document = {**kimik3_error_document(failure), **document}
    click.echo(json.dumps(document, indent=2, default=str))


def _standing_table(standings, goal) -> Table:  # noqa: ANN001 - list[Standing], Goal
    """Each candidate drawn: the median of its draws with the spread beside it (a figure without its spread
    is how the old search ranked noise)."""
    table = Table(
        "knobs",
        f"{goal.metric}@{goal.concurrency} {goal.unit} (median)",
        "spread",
        "draws",
        "result",
        title="candidates, best first",
    )
    for s in standings:
        knobs = " ".join(f"{k}={v}" for k, v in sorted(s.knobs.items()))
        table.add_row(
            Text(knobs),
            "-" if s.figure is None else f"{s.figure:.2f}",
            "-" if s.spread is None else f"±{s.spread * 100:.1f} %",
            str(s.draws),
            Text("ok" if s.feasible else (s.detail or "failed")),
        )
    return table


def _trial_table(trials, goal) -> Table:  # noqa: ANN001 - list[Trial], Goal
    table = Table(
        "stage",
        "knobs",
        "result",
        f"{goal.metric}@{goal.concurrency} {goal.unit}",
        "TTFT p95 s",
        "seconds",
        title=f"tune for {goal}",
    )
    for t in trials:
        knobs = " ".join(f"{k}={v}" for k, v in sorted(t.knobs.items()))
        table.add_row(
            str(t.stage),
            Text(knobs),
            Text(t.status if not t.detail else f"{t.status}: {t.detail}"),
            "-" if t.figure is None else f"{t.figure:.2f}",
            "-" if t.ttft_p95 is None else f"{t.ttft_p95:.3f}",
            "-" if t.seconds is None else str(t.seconds),
        )
    return table
