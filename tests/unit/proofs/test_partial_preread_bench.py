"""bench/load.py --partial-preread's summary (issue 27): each mode's median downtime and its ratio to the cold
median, per draw too, and kimik3's predicted partial downtime (the cached share at the warm reference's time, the
rest at the cold one's) against the measured; a run cut short still reports what it has."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _bench():  # noqa: ANN202 - the bench script, loaded as a module
    spec = importlib.util.spec_from_file_location("bench_load", ROOT / "bench" / "load.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _draw(mode: str, downtime: float, read: int, cached: int) -> dict:
    return {"mode": mode, "downtime_s": downtime, "preread_bytes": read, "cached_before_swap": cached}


FACTS = {
    "model_bytes": 1000,
    "files": 4,
    "balloon": {"bytes": 10, "how": "mlock", "swap_total": 0},
    "mem_available_with_balloon": 700,
    "reserve": 200,
    "reserve_kimik3": 100,
}


def test_the_ratios_and_the_prediction(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    draws = [
        _draw("full, fits (no balloon)", 3.0, 1000, 1000),
        _draw("full, fits (no balloon)", 3.2, 1000, 1000),
        *(_draw("none", s, 0, 0) for s in (10.0, 11.0, 9.0)),
        *(_draw("partial", s, 500, 500) for s in (7.0, 6.0, 8.0)),
        *(_draw("full", s, 1000, 600) for s in (12.0, 10.0, 11.0)),
    ]
    out = tmp_path / "partial.json"
    _bench().report_partial(argparse.Namespace(json=out), FACTS, draws)
    summary = json.loads(out.read_text())["summary"]
    assert summary["none"]["ratio"] == 1.0 and summary["partial"]["ratio"] == 0.7 and summary["full"]["ratio"] == 1.1
    assert summary["partial"]["ratios"] == [0.7, 0.6, 0.8] and summary["partial"]["n"] == 3
    # 50 % pre-read: 0.5 x the warm median 3.1 s + 0.5 x the cold median 10 s
    assert summary["partial_predicted_s"] == pytest.approx(6.55)
    assert summary["partial_measured_over_predicted"] == pytest.approx(7.0 / 6.55, abs=1e-3)
    printed = capsys.readouterr().out
    assert "| partial | 3 |" in printed and "6.00-8.00" in printed and "reload downtime / cold:" in printed


def test_a_run_cut_short_reports_what_it_has(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "short.json"
    _bench().report_partial(
        argparse.Namespace(json=out), {**FACTS, "error": "RuntimeError: boom"}, [_draw("partial", 7.0, 500, 500)]
    )
    summary = json.loads(out.read_text())["summary"]
    assert summary["partial"]["ratio"] is None and "partial_predicted_s" not in summary
    assert json.loads(out.read_text())["facts"]["error"] == "RuntimeError: boom"
