"""The sweep as curves (PNG or SVG, by the file's suffix): aggregate and per-request decode tok/s, and
TTFT p50/p95, against concurrency; one line per run, so `--compare` reads as overlaid curves."""

from __future__ import annotations

from pathlib import Path

from kimik3_reconciler.errors import InputError
from kimik3_reconciler.model.bench import BenchRun


def run_label(run: BenchRun) -> str:
    knobs = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in run.knobs.items()
                      if k in ("serve.ubatch", "serve.parallel", "serve.n_cpu_moe", "serve.fit_target"))
    return f"{run.fingerprint[:8]} {run.date[:16]}" + (f" ({knobs})" if knobs else "")


def check_plot_path(path: Path) -> None:
    """Refuse a plot path that cannot be written before any request is sent: `bench` checks it first, so a typo
    in `--plot` does not cost a sweep of minutes that then ends in an error."""
    if path.suffix.lower() not in (".png", ".svg"):
        raise InputError(f"{path}: the plot is written as .png or .svg (by the file's suffix)")
    if not path.parent.is_dir():
        raise InputError(f"{path}: its folder {path.parent} does not exist: create it, or choose another --plot path")


def plot_runs(runs: list[BenchRun], path: Path) -> None:
    check_plot_path(path)
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    fig, (rate, ttft) = plt.subplots(1, 2, figsize=(11, 4.2))
    for run in runs:
        grid = [lv.concurrency for lv in run.levels]
        label = run_label(run)
        line, = rate.plot(grid, [lv.aggregate for lv in run.levels], marker="o", label=f"{label} aggregate")
        rate.plot(grid, [lv.decode_p50 or float("nan") for lv in run.levels], marker=".", linestyle="--",
                  color=line.get_color(), label=f"{label} per request")
        ttft.plot(grid, [lv.ttft_p95 or float("nan") for lv in run.levels], marker="o", color=line.get_color(),
                  label=f"{label} p95")
        ttft.plot(grid, [lv.ttft_p50 or float("nan") for lv in run.levels], marker=".", linestyle="--",
                  color=line.get_color(), label=f"{label} p50")
    for axis, title, unit in ((rate, "decode throughput", "tok/s"), (ttft, "time to first token", "seconds")):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("concurrent requests")
        axis.set_ylabel(unit)
        axis.set_title(title)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=7)
    fig.suptitle(f"kimik3 bench {runs[0].profile}" if runs else "kimik3 bench")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
