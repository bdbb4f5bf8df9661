"""How docs/operations.md writes a fleet cache bench's recorded runs (bench/fleet_cache.py's --json): the table row
of each phase and a summary's ratio, rebuilt from the record by the tests that check the docs quote those runs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def phase_row(invocation: int, run: int, phase: dict[str, Any], held: bool = False) -> str:
    """One phase (a policy's run) as a table row: invocation and run, policy, hit rate, TTFT p50 and p95, seconds,
    each replica's share of requests, and with `held` each replica's most slots held (the agent trace's column)."""
    cells = [
        f"{invocation}, {run}",
        phase["policy"],
        f"{100 * phase['hit_rate']:.1f} %",
        f"{phase['ttft_p50']:.2f} s",
        f"{phase['ttft_p95']:.2f} s",
        f"{phase['seconds']:.0f} s",
        "/".join(f"{x:.2f}" for x in phase["share"]),
    ]
    if held:
        cells.append("/".join(str(h) for h in phase["held_max"]))
    return "| " + " | ".join(cells) + " |"


def table_rows(invocations: list[list[list[dict[str, Any]]]], held: bool = False) -> Iterator[str]:
    """Every phase's row, numbered from 1 by invocation and by run within it, as the docs' tables number them."""
    for invocation, runs in enumerate(invocations, 1):
        for run, phases in enumerate(runs, 1):
            for phase in phases:
                yield phase_row(invocation, run, phase, held)


def quoted(part: str) -> str:
    """A summary's figures as the docs write them: `... x median 1.05 (min 1.05, max 1.07, 2 runs)` → `1.05× (1.05–1.07`."""
    figures = part.split("median ", 1)[1]
    middle = figures.split(" ")[0]
    low, high = figures.split("min ")[1].split(",")[0], figures.split("max ")[1].split(",")[0]
    return f"{middle}× ({low}–{high}"
