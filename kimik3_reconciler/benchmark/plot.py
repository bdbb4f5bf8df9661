"""The sweep as curves (PNG or SVG, by the file's suffix): aggregate and per-request decode tok/s, and
TTFT p50/p95, against concurrency; one colour per run, so `--compare` reads as overlaid curves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.errors import InputError
from kimik3_reconciler.model.bench import BenchRun
from kimik3_reconciler.model.engine_names import ENGINES

UNLABELLED = ("serve.", "host.")  # serve.batch/ctx_size, host.threads: in the record, not the label


def _label_knobs() -> tuple[str, ...]:
    """The launch knobs a run's label names (the ones tune moves): every engine's `bench_knobs.labelled` (llama.cpp's
    serve fields), in registry order; then every knob of an engine's own section the run was filed with
    (vllm.max_num_seqs: benchmark.run_sweep files only tune's); the rest of the run's inputs are in its record."""
    return tuple(knob for name in ENGINES for knob in engine_for(name).bench_knobs.labelled)


def run_label(run: BenchRun) -> str:
    # A knob the profile leaves unset is kept as None (llama-server's --fit decides it): naming it would say
    # "n_cpu_moe=None", which reads as a value; only the knobs that are set are named.
    named = [*_label_knobs(), *(k for k in run.knobs if not k.startswith(UNLABELLED))]
    knobs = ", ".join(f"{k.split('.')[-1]}={run.knobs[k]}" for k in named if run.knobs.get(k) is not None)
    return f"{run.fingerprint[:8]} {run.date[:16].replace('T', ' ')}" + (f" ({knobs})" if knobs else "")


def check_plot_path(path: Path) -> None:
    """Refuse a plot path that cannot be written before any request is sent: `bench` checks it first, so a typo
    in `--plot` does not cost a sweep of minutes that then ends in an error."""
    if path.suffix.lower() not in (".png", ".svg"):
        raise InputError(f"{path}: the plot is written as .png or .svg (by the file's suffix)")
    if not path.parent.is_dir():
        raise InputError(f"{path}: its folder {path.parent} does not exist: create it, or choose another --plot path")


def _nan(value: float | None) -> float:
    return float("nan") if value is None else value


def plot_figure(runs: list[BenchRun]) -> Any:  # noqa: ANN401 - a matplotlib Figure (imported lazily)
    """The figure, not yet written: two panels, and one legend below them that covers no point, tick or label.

    The legend has one entry per run (its colour) and a key for the two line styles, which mean the same in
    both panels (solid: aggregate tok/s, TTFT p95; dashed: per-request tok/s, TTFT p50)."""
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, NullLocator

    fig, (rate, ttft) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    handles = []
    for run in runs:
        grid = [lv.concurrency for lv in run.levels]
        (line,) = rate.plot(grid, [lv.aggregate for lv in run.levels], marker="o")
        colour = line.get_color()
        rate.plot(grid, [_nan(lv.decode_p50) for lv in run.levels], marker=".", linestyle="--", color=colour)
        ttft.plot(grid, [_nan(lv.ttft_p95) for lv in run.levels], marker="o", color=colour)
        ttft.plot(grid, [_nan(lv.ttft_p50) for lv in run.levels], marker=".", linestyle="--", color=colour)
        handles.append(Line2D([], [], color=colour, marker="o", label=run_label(run)))
    handles += [
        Line2D([], [], color="grey", marker="o", label="solid: aggregate tok/s, TTFT p95"),
        Line2D([], [], color="grey", marker=".", linestyle="--", label="dashed: per-request tok/s, TTFT p50"),
    ]
    # The concurrency levels measured, as numbers: a log-2 axis would otherwise label 1, 2 as 2^0, 2^1 and
    # put ticks where nothing was measured.
    levels = sorted({lv.concurrency for run in runs for lv in run.levels})
    for axis, title, unit in ((rate, "decode throughput", "tok/s"), (ttft, "time to first token", "seconds")):
        axis.set_xscale("log", base=2)
        axis.xaxis.set_major_locator(FixedLocator(levels))
        axis.xaxis.set_minor_locator(NullLocator())
        axis.set_xticks(levels, [str(c) for c in levels])
        axis.set_xlabel("concurrent requests")
        axis.set_ylabel(unit)
        # From 0, and a tenth above the highest point: a point on the frame's edge is half hidden (a lone level
        # has no spread for matplotlib's own margin to work from).
        highest = max((y for line in axis.get_lines() for y in line.get_ydata() if y == y), default=0.0)
        axis.set_ylim(0, highest * 1.1 or 1.0)
        axis.set_title(title)
        axis.grid(True, alpha=0.3)
    fig.legend(handles=handles, loc="outside lower center", ncols=1 if len(runs) > 1 else 3, fontsize=8, frameon=False)
    fig.suptitle(f"kimik3 bench {runs[0].profile}" if runs else "kimik3 bench")
    return fig


def plot_runs(runs: list[BenchRun], path: Path) -> None:
    check_plot_path(path)
    import matplotlib.pyplot as plt

    fig = plot_figure(runs)
    fig.savefig(path)
    plt.close(fig)
