"""`bench --plot` as a user reads it: the legend covers no point, tick or axis label, the x ticks are the
concurrency levels measured (1, 2, not 2^0, 2^1), and a run's label names only the knobs that are set."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimik3_reconciler.benchmark.plot import plot_figure, plot_runs, run_label
from kimik3_reconciler.model.bench import BenchRun, BenchSettings, LevelResult


def _run(fingerprint: str, grid: list[int], aggregate: list[float], knobs: dict) -> BenchRun:
    levels = tuple(
        LevelResult(
            concurrency=c,
            requests=c * 4,
            errors=0,
            wall_s=10.0,
            ttft_p50=0.2 * c,
            ttft_p95=0.3 * c,
            itl_p50=0.05,
            decode_p50=agg / c,
            aggregate=agg,
            prompt_rate=500.0,
            server_decode_p50=agg / c,
            server_prompt_p50=500.0,
            metrics_tokens=c * 512.0,
            client_tokens=c * 512,
        )
        for c, agg in zip(grid, aggregate)
    )
    return BenchRun("k3-h200", fingerprint, "2026-12-03T14:02:11+00:00", BenchSettings(grid=tuple(grid)), levels, knobs)


# As tune keeps them: n_cpu_moe and fit_target are None where the profile leaves the split to --fit.
UNSET = {"serve.ubatch": 512, "serve.parallel": 1, "serve.n_cpu_moe": None, "serve.fit_target": None}
RUNS = {
    "the reviewer's grid 1,2": [_run("77e0b1c5d2aa0943", [1, 2], [24.0, 31.5], UNSET)],
    "two runs compared": [
        _run("3f9c2a71d04e8b55", [1, 4, 8, 16, 32], [18.2, 52.1, 81.4, 104.9, 118.3], UNSET),
        _run("a81d55e0c3b7f912", [1, 4, 8, 16, 32], [19.5, 58.8, 96.0, 131.2, 139.7], {**UNSET, "serve.n_cpu_moe": 40}),
    ],
    "one level": [_run("11e0b1c5d2aa0943", [1], [24.0], {})],
}


def test_a_label_names_only_the_knobs_that_are_set() -> None:
    label = run_label(RUNS["two runs compared"][1])
    assert label == "a81d55e0 2026-12-03 14:02 (ubatch=512, parallel=1, n_cpu_moe=40)"
    assert "None" not in run_label(RUNS["the reviewer's grid 1,2"][0])
    assert run_label(RUNS["one level"][0]) == "11e0b1c5 2026-12-03 14:02"


@pytest.mark.parametrize("case", list(RUNS))
def test_the_legend_covers_nothing_and_the_ticks_are_the_levels(case: str) -> None:
    runs = RUNS[case]
    fig = plot_figure(runs)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend = fig.legends[0].get_window_extent(renderer)
    levels = sorted({lv.concurrency for run in runs for lv in run.levels})
    for axis in fig.axes:
        # the panel with its tick labels, axis labels and title: nothing of it under the legend
        assert not legend.overlaps(axis.get_tightbbox(renderer)), f"{case}: the legend covers {axis.get_title()}"
        assert [t.get_text() for t in axis.get_xticklabels()] == [str(c) for c in levels]
        assert list(axis.xaxis.get_minorticklocs()) == []  # no unlabelled ticks between the levels
        frame = axis.get_window_extent(renderer)
        for line in axis.get_lines():  # every measured point inside the frame, none on its edge
            for x, y in line.get_xydata():
                if y != y:  # a level without the figure (NaN) draws nothing
                    continue
                px, py = axis.transData.transform((x, y))
                assert frame.x0 < px < frame.x1 and frame.y0 < py < frame.y1, f"{case}: ({x}, {y}) on the edge"
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert [run_label(run) for run in runs] == texts[: len(runs)] and not any("None" in t for t in texts)


def test_the_plot_is_written_as_png(tmp_path: Path) -> None:
    plot_runs(RUNS["two runs compared"], tmp_path / "b.png")
    assert (tmp_path / "b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
