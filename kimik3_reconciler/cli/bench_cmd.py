"""`kimik3 bench`: the sweep, its table, JSON and plot, and `--compare` over the runs kept in state."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from kimik3_reconciler.cli import _ctx, _err, _out, _run
from kimik3_reconciler.cli.inputs import load
from kimik3_reconciler.cli.options import count_option
from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.errors import InputError, NothingMeasured
from kimik3_reconciler.model.bench import (
    DEFAULT_GRID,
    DEFAULT_OUTPUT_TOKENS,
    DEFAULT_PROMPT_TOKENS,
    DEFAULT_PROMPTS,
    BenchRun,
    BenchSettings,
    LevelResult,
)


class Grid(click.ParamType):
    """Concurrency levels: "1,4,8" or "1 4 8"; each at least 1."""

    name = "grid"

    def convert(self, value, param, ctx):  # noqa: ANN001, ANN201 - click's signature
        if isinstance(value, tuple):
            return value
        try:
            levels = tuple(int(v) for v in str(value).replace(",", " ").split())
        except ValueError:
            self.fail(f"{value!r}: expected whole numbers, e.g. '1,4,8'", param, ctx)
        if not levels or min(levels) < 1:
            self.fail(f"{value!r}: expected concurrency levels of at least 1", param, ctx)
        if len(set(levels)) != len(levels):
            # A kept run has one result per level (BenchRun.level): `--grid 1,1` measured c=1 twice, --compare and the
            # plot showed one of them.
            self.fail(f"{value!r}: lists a level twice; --repetitions N runs each level N times", param, ctx)
        return levels


def _pct(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio * 100:+.1f}%"


def _num(value: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def level_table(run: BenchRun) -> Table:
    table = Table(
        "c",
        "req",
        "err",
        "TTFT p50 s",
        "TTFT p95 s",
        "ITL p50 ms",
        "decode tok/s",
        "aggregate tok/s",
        "prompt tok/s",
        "server decode",
        "Δ decode",
        "Δ prompt",
        "Δ /metrics tokens",
        title=f"bench {run.profile} (deployment {run.fingerprint}, {run.date})",
    )
    for lv in run.levels:
        table.add_row(
            str(lv.concurrency),
            str(lv.requests),
            str(lv.errors),
            _num(lv.ttft_p50, "{:.3f}"),
            _num(lv.ttft_p95, "{:.3f}"),
            _num(lv.itl_p50 and lv.itl_p50 * 1000),
            _num(lv.decode_p50),
            _num(lv.aggregate),
            _num(lv.prompt_rate),
            _num(lv.server_decode_p50),
            _pct(lv.decode_disagreement),
            _pct(lv.prompt_disagreement),
            _pct(lv.metrics_disagreement),
        )
    return table


def compare_table(runs: list[BenchRun]) -> Table:
    from kimik3_reconciler.benchmark.plot import run_label

    table = Table("c", title=f"bench --compare {runs[0].profile}: aggregate tok/s | decode tok/s | TTFT p95 s")
    for run in runs:
        table.add_column(Text(run_label(run)))
    grid = sorted({lv.concurrency for run in runs for lv in run.levels})
    for c in grid:
        cells = []
        for run in runs:
            lv: LevelResult | None = run.level(c)
            cells.append(
                "-" if lv is None else f"{lv.aggregate:.1f} | {_num(lv.decode_p50)} | {_num(lv.ttft_p95, '{:.3f}')}"
            )
        table.add_row(str(c), *cells)
    return table


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option(
    "--grid", type=Grid(), default=",".join(map(str, DEFAULT_GRID)), show_default=True, help="concurrency levels"
)
@count_option(
    "--prompts", DEFAULT_PROMPTS, "requests per concurrent stream at each level (a level sends c x this many)"
)
@count_option("--prompt-tokens", DEFAULT_PROMPT_TOKENS, "exact prompt length in tokens (the server's own tokenizer)")
@count_option(
    "--output-tokens", DEFAULT_OUTPUT_TOKENS, "exact output length in tokens (end-of-sequence ignored)", least=2
)
@count_option("--repetitions", 1, "run each level this many times (samples pooled)")
@click.option(
    "--compare",
    is_flag=True,
    help="send nothing: put the kept runs of this profile side by side (the newest per deployment)",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False),
    default=None,
    help="write throughput and TTFT against concurrency to this .png or .svg",
)
@click.option("--json", "json_out", is_flag=True, help="print the run (or the compared runs) as JSON on stdout")
@click.pass_context
@_run
def bench(
    ctx: click.Context,
    file: str,
    grid: tuple[int, ...],
    prompts: int,
    prompt_tokens: int,
    output_tokens: int,
    repetitions: int,
    compare: bool,
    plot: str | None,
    json_out: bool,
) -> None:
    """Measure the converged server: a closed-loop concurrency sweep (TTFT, inter-token latency, decode and
    aggregate tok/s), cross-checked against the server's own timings and /metrics; kept per deployment.

    Refuses (exit 4) when the host is not converged to FILE, naming the plan's changes."""
    from kimik3_reconciler.benchmark import converged_deployment, run_sweep
    from kimik3_reconciler.benchmark.plot import check_plot_path, plot_runs
    from kimik3_reconciler.benchmark.store import keep, kept, latest_per_fingerprint

    if plot:
        check_plot_path(Path(plot))  # before the sweep: `--plot x.pdf` used to fail after minutes of requests
    loaded = load(file)
    orchestrator = _ctx(ctx, json_out).orchestrator(file)
    if compare:
        runs = latest_per_fingerprint(kept(orchestrator.ports.state, loaded.profile.name))
        if not runs:  # exit 1 through _run: with --json the error document is stdout (SystemExit left it empty)
            raise NothingMeasured(f"no kept bench runs of {loaded.profile.name}: run `kimik3 bench {file}` first")
        if json_out:
            click.echo(json.dumps([r.to_json() for r in runs], indent=2))
        else:
            _out.print(compare_table(runs))
    else:
        settings = BenchSettings(grid, prompts, prompt_tokens, output_tokens, repetitions)
        refusal = settings.slot_refusal(*engine_for(loaded.profile.engine).request_room(loaded.profile, None))
        if refusal is not None:  # before the host is read: the profile alone says no request would fit
            raise InputError(refusal)
        observed = converged_deployment(orchestrator, loaded)
        _err.print(
            f"bench {loaded.profile.name}: {settings.requests()} requests over concurrency {list(grid)} "
            f"({prompt_tokens} prompt + {output_tokens} output tokens each, closed loop)"
        )

        def said(level: LevelResult) -> None:
            _err.print(
                f"  c={level.concurrency}: aggregate {level.aggregate:.1f} tok/s, TTFT p95 "
                f"{_num(level.ttft_p95, '{:.3f}')} s, {level.errors} error(s)"
            )

        run = run_sweep(orchestrator, loaded, settings, observed, said)
        key = keep(orchestrator.ports.state, run)
        runs = [run]
        if json_out:
            click.echo(json.dumps({**run.to_json(), "kept_as": key}, indent=2))
        else:
            _out.print(level_table(run))
            _out.print(
                "Δ: the client's figure against the server's own (timings per request, /metrics counters "
                "for the level); kept as " + key
            )
    if plot:
        plot_runs(runs, Path(plot))
        _err.print(f"plot written to {plot}")
