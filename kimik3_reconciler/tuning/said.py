"""How tune says what it measured (pure): knobs, one draw, a candidate with its spread, a duration."""

from __future__ import annotations

from typing import Any

from kimik3_reconciler.model.tuning import Goal, Trial
from kimik3_reconciler.tuning.evidence import Standing, spread_said


def knobs_said(knobs: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(knobs.items())) or "(as written)"


def draw_said(trial: Trial, goal: Goal) -> str:
    if trial.status == "failed":
        return f"failed: {trial.detail}"
    if trial.score is None:
        return f"not counted: {trial.detail}"
    ttft = f", TTFT p95 {trial.ttft_p95:.2f} s" if trial.ttft_p95 is not None else ""
    return f"{goal.metric}@{goal.concurrency} {trial.figure:.2f} {goal.unit}{ttft}"


def standing_said(standing: Standing | None, goal: Goal) -> str:
    if standing is None or standing.figure is None:
        return "not measured"
    return f"{goal.metric}@{goal.concurrency} {standing.figure:.2f} {goal.unit} ({spread_said(standing)})"


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"
