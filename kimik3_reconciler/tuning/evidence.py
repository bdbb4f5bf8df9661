"""What the draws say (pure): each candidate's figure with its spread, the noise pooled over every candidate
drawn more than once, and whether one candidate is measurably better than another.

A draw is one launch, a warm-up and one bench. On the H200 one candidate's draws moved by 7-15 % between
launches (tools/gpu_proof/README.md), as much as the gap between good candidates, so a ranking of single draws
ranks noise. The comparison is done on the log of the figure (the noise is a share of the figure, not a fixed
number of tok/s), and the noise is pooled over all candidates (each has few draws, together they have many):
A is measurably better than B when the difference of their mean logs exceeds the one-sided 95 % Student-t
bound of that pooled noise for their draw counts. With no candidate drawn twice nothing is measurably better.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

LEVEL = 0.05  # a comparison's one-sided error rate: "measurably better" is right 95 times in 100


def t_bound(alpha: float, df: int) -> float:
    """The one-sided (1 - alpha) quantile of Student's t with `df` degrees of freedom (inf without any): the
    bisection of its exact distribution function, not a table, since a corrected level (alpha / comparisons)
    can be any number."""
    if df < 1:
        return math.inf
    low, high = 0.0, 1.0
    while _t_tail(high, df) > alpha:  # the tail falls as t grows: bracket, then halve
        low, high = high, high * 2
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if _t_tail(middle, df) > alpha else (low, middle)
    return high


def _t_tail(t: float, df: int) -> float:
    """P(T > t) for t >= 0: Abramowitz & Stegun 26.7.3-4, the closed form of Student's t for whole `df`."""
    theta = math.atan(t / math.sqrt(df))
    c2, term, total = math.cos(theta) ** 2, 1.0, 1.0
    if df % 2 == 0:
        for i in range(1, df // 2):
            term *= c2 * (2 * i - 1) / (2 * i)
            total += term
        inside = math.sin(theta) * total
    else:
        for i in range(1, (df - 1) // 2):
            term *= c2 * (2 * i) / (2 * i + 1)
            total += term
        inside = 2 / math.pi * (theta + (math.sin(theta) * math.cos(theta) * total if df > 1 else 0.0))
    return (1 - inside) / 2


@dataclass
class Standing:
    """One candidate as its draws stand: `figure` is their median, `spread` the half-range as a share of it
    (None with one draw). `feasible`: no draw failed (a crash, an error, no figure) and most draws met the goal's
    bounds: a setting that breaks its bound in the typical bench is no answer, one that grazed it once among
    several is judged by the rest. `score`: the mean of the draws' log-figures, signed so that higher is better."""

    knobs: dict[str, Any]
    figures: list[float | None] = field(default_factory=list)
    scores: list[float | None] = field(default_factory=list)  # per draw, on the log scale; None: failed
    figure: float | None = None
    spread: float | None = None
    score: float | None = None
    draws: int = 0
    feasible: bool = False
    detail: str = ""
    raw: float | None = None  # the mean of the log-figures whether or not the bounds were met
    doubtful: bool = False  # infeasible only by a bound, and one more draw meeting it would make it feasible

    @classmethod
    def of(
        cls, knobs: dict[str, Any], draws: list[tuple[float | None, float | None, str]], minimised: bool = False
    ) -> Standing:
        """From (figure, score, detail) per draw: the figure as measured, the goal's score (None: the draw failed
        or broke a bound), why not."""
        figures = [f for f, _, _ in draws]
        values = [None if f is None or f <= 0 else (-math.log(f) if minimised else math.log(f)) for f in figures]
        met = sum(score is not None for _, score, _ in draws)
        feasible = bool(draws) and all(v is not None for v in values) and met * 2 >= len(draws)
        detail = next((d for _, score, d in draws if score is None and d), "")
        measured = sorted(f for f in figures if f is not None)
        figure = _median(measured) if measured else None
        spread = ((measured[-1] - measured[0]) / 2 / figure) if figure and len(measured) > 1 else None
        known = [v for v in values if v is not None]
        raw = sum(known) / len(known) if known else None
        doubtful = not feasible and bool(draws) and len(known) == len(draws) and (met + 1) * 2 >= len(draws) + 1
        return cls(
            knobs,
            figures,
            values,
            figure,
            spread,
            raw if feasible else None,
            len(draws),
            feasible,
            detail,
            raw,
            doubtful,
        )


def _median(sorted_values: list[float]) -> float:
    n = len(sorted_values)
    return sorted_values[n // 2] if n % 2 else (sorted_values[n // 2 - 1] + sorted_values[n // 2]) / 2


@dataclass(frozen=True)
class Noise:
    """The pooled spread of draws of one candidate, on the log scale, and its degrees of freedom."""

    sigma: float
    df: int

    @classmethod
    def pooled(cls, standings: list[Standing]) -> Noise:
        squares, df = 0.0, 0
        for s in standings:
            values = [v for v in s.scores if v is not None]
            if len(values) > 1:
                mean = sum(values) / len(values)
                squares += sum((v - mean) ** 2 for v in values)
                df += len(values) - 1
        return cls(math.sqrt(squares / df) if df else math.inf, df)

    def margin(self, a: Standing, b: Standing, alpha: float = LEVEL) -> float:
        """The difference of mean log-values A must exceed to be measurably better than B, at the one-sided
        error rate `alpha`."""
        if not self.df or not a.draws or not b.draws:
            return math.inf
        return t_bound(alpha, self.df) * self.sigma * math.sqrt(1 / a.draws + 1 / b.draws)

    def better(self, a: Standing, b: Standing, alpha: float = LEVEL) -> bool:
        """A is measurably better than B (B infeasible and A feasible counts as better)."""
        if not a.feasible or a.score is None:
            return False
        if not b.feasible or b.score is None:
            return b.draws > 0
        return a.score - b.score > self.margin(a, b, alpha)

    def said(self) -> str:
        if not self.df:
            return "no candidate drawn twice yet"
        return f"draw-to-draw noise ±{(math.exp(self.sigma) - 1) * 100:.1f} % ({self.df} degrees of freedom)"


def spread_said(standing: Standing) -> str:
    if standing.spread is None:
        return "1 draw"
    return f"±{standing.spread * 100:.1f} %, {standing.draws} draws"
