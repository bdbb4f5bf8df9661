"""One `kimik3 tune` from start to end: under the host lock, resume a killed search or start one on the converged
host (its space and baseline recorded first), run the search, write the winner when asked, and always converge
the end state (the winner written, or FILE as it was). The CLI parses, calls `tune` and renders its outcome."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimik3_reconciler.benchmark import converged_deployment
from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.engines.base import TuneKnobs
from kimik3_reconciler.errors import BudgetTooShort, NothingMeasured
from kimik3_reconciler.model.bench import BenchSettings
from kimik3_reconciler.model.loaded_profile import LoadedProfile
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.model.tuning import FIT, Goal, Trial, knob_id, search_key
from kimik3_reconciler.orchestrator import Orchestrator
from kimik3_reconciler.planning.tune_space import candidate_text, default_space
from kimik3_reconciler.tuning import CandidateRunner, Search, SearchResult, with_settings
from kimik3_reconciler.tuning.evidence import Standing, spread_said
from kimik3_reconciler.tuning.said import minutes

MIN_LAUNCHES = 3  # the fewest a search compares: a candidate, a rival, and one relaunch to tell them apart


@dataclass(frozen=True)
class TuneRequest:
    """What `kimik3 tune` was asked: the goal, the space given (empty: the profile's default space for this host),
    the bench sizes and the search's limits."""

    goal: Goal
    asked: dict[str, tuple[Any, ...]]
    base: BenchSettings
    prompts: int
    budget_s: float
    finalists: int
    max_trials: int | None
    repeats: int
    lock_timeout_s: float


@dataclass(frozen=True)
class TuneOutcome:
    result: SearchResult
    baseline_knobs: dict[str, Any]
    failure: NothingMeasured | None  # candidates were launched and none was measured (exit 1)


def tune(
    orchestrator: Orchestrator,
    runner: CandidateRunner,
    loaded: LoadedProfile,
    file: str,
    request: TuneRequest,
    say: Callable[[str], None],
    write_profile: Callable[[str], None] | None = None,
) -> TuneOutcome:
    """Search under the host lock; with `write_profile` (--write) the winner's knobs are written into FILE's text
    (comments and key order kept, the figures as a comment) and the host converges on it; the host always ends
    on the winner written or on FILE as it was, whatever the search raised."""
    goal = request.goal
    short = with_settings(request.base, goal, request.prompts, 1)
    long = with_settings(request.base, goal, request.prompts * 2, 1)
    key = search_key(
        loaded.profile.name,
        loaded.text,
        goal,
        request.asked,
        {
            "short": short.requests(),
            "long": long.requests(),
            "repeats": request.repeats,
            "tokens": [request.base.prompt_tokens, request.base.output_tokens],
            "search": 3,
        },
    )
    with orchestrator.locked("tune", loaded.profile, request.lock_timeout_s):
        record = orchestrator.ports.state.read(key) or {}
        if record.get("trials"):  # a killed search: the host may be on one of its candidates
            observed = orchestrator.observe(loaded)
            the_space = {k: tuple(v) for k, v in record["space"].items()}
            baseline_knobs = record["baseline"]
        else:
            observed = converged_deployment(orchestrator, loaded)  # refuses (exit 4) unless converged on FILE
            engine = engine_for(loaded.profile.engine)
            the_space = request.asked or default_space(engine, loaded.profile, observed)
            baseline_knobs = running_knobs(the_space, observed, engine.tune_knobs)
        say(
            f"tune {loaded.profile.name} for {goal}: space "
            + " ".join(f"{k}={','.join(map(str, v))}" for k, v in the_space.items())
            + f" (state {key})"
        )
        # a fresh search with a budget too short is refused; a resumed one is not: the host may be on the killed
        # search's candidate, and going on (as far as the budget allows) is what settles it back on FILE
        say(launches_said(request.budget_s, runner.load_seconds(loaded, observed), resumed=bool(record.get("trials"))))
        if not record.get("trials"):  # recorded once the search may start: a refused budget leaves no record
            orchestrator.ports.state.write(
                key,
                {
                    "space": {k: list(v) for k, v in the_space.items()},
                    "baseline": baseline_knobs,
                    "file": str(Path(file).resolve()),
                },
            )
        search = Search(
            runner,
            orchestrator.ports.state,
            orchestrator.ports.clock,
            say,
            loaded,
            goal,
            the_space,
            short,
            long,
            key,
            request.budget_s,
            request.finalists,
            request.max_trials,
            request.repeats,
        )
        target = loaded
        try:
            result = search.run(observed, baseline_knobs)
            if write_profile is not None and result.winner is not None:
                note = (
                    f"kimik3 tune {orchestrator.ports.clock.now():%Y-%m-%d} ({goal}): "
                    f"{figure(result.winner, goal)} measured, was {figure(result.baseline, goal)} as written"
                )
                new_text = candidate_text(loaded.text, loaded.profile, result.winner.knobs, note)
                write_profile(new_text)
                target = parse_profile(new_text, source=file)
        finally:  # never left on a candidate: the winner (written) or FILE as it was
            say(f"converging on {'the winner' if target is not loaded else file + ' as written'}")
            runner.settle(target)
    return TuneOutcome(result, baseline_knobs, nothing_measured(result.trials, baseline_knobs))


def launches_said(budget_s: float, load_s: float, resumed: bool = False) -> str:
    """How many launches `budget_s` fits at this host's load time (tuning/runner.py's load_seconds: the placement
    forecast at the load rate recorded here, or the container's last recorded load). A budget that fits fewer than
    MIN_LAUNCHES is refused before anything is launched: on the seed's host a launch is ~6 min warm, ~17 min cold,
    and a search cut after one or two launches compares nothing, yet holds the host for the whole budget. A
    `resumed` search is said, not refused: its run is what brings a host left on a candidate back to FILE."""
    if load_s <= 0:  # never loaded here and no forecast: the first launch measures it
        return (
            f"budget {minutes(budget_s)}: no load time on record for this host; the launches it fits are known "
            "once the first is measured"
        )
    fits = int(budget_s // load_s)
    if fits < MIN_LAUNCHES and resumed:
        return (
            f"budget {minutes(budget_s)}: {fits} launch(es) at this host's load time (~{minutes(load_s)} a "
            f"launch), fewer than a search needs ({MIN_LAUNCHES}); a resumed search goes on as far as it allows, "
            "then settles on FILE as written"
        )
    if fits < MIN_LAUNCHES:
        needed = math.ceil(MIN_LAUNCHES * load_s / 60) * 60
        raise BudgetTooShort(
            f"--budget {minutes(budget_s)} fits {fits} launch(es) at this host's load time (~"
            f"{minutes(load_s)} a launch); a search needs at least {MIN_LAUNCHES}: give --budget "
            f"{needed // 60:.0f}m or more (nothing was launched)"
        )
    return f"budget {minutes(budget_s)}: {fits} launch(es) at this host's load time (~{minutes(load_s)} a launch)"


def running_knobs(space: dict[str, tuple[Any, ...]], observed, tune: TuneKnobs) -> dict[str, Any]:  # noqa: ANN001
    """The running (as written) value of each searched knob (the container's launch inputs, `<section>.<knob>`):
    the trial that needs no load. An automatic knob left unset runs as the engine decides: FIT."""
    running = observed.container.inputs if observed.container else {}
    fixed = {"threads": observed.host.physical_cores, "load_mode": running.get("serve.load_mode") or "none"}
    knobs = {k: fixed[k] if k in fixed else running.get(f"{tune.section}.{k}") for k in space}
    for name in tune.automatic:
        if name in knobs and knobs[name] is None:
            knobs[name] = FIT  # the running profile leaves it to the engine (llama.cpp's split: --fit)
    return knobs


def nothing_measured(trials: list[Trial], baseline_knobs: dict[str, Any]) -> NothingMeasured | None:
    """The error (exit 1) when candidates were launched and none of them was measured: "nothing beat FILE" would
    hide a search that measured nothing (a broken build, a server that never comes up)."""
    launched = [t for t in trials if knob_id(t.knobs) != knob_id(baseline_knobs)]
    if launched and all(t.status == "failed" for t in launched):
        first = next(t.detail for t in launched)
        return NothingMeasured(
            f"every candidate tune launched failed ({len(launched)}; the first: {first}); the host runs FILE as written"
        )
    return None


def proposed_text(loaded: LoadedProfile, knobs: dict[str, Any]) -> str:
    """FILE's text with `knobs` written into it (comments and key order kept): what --write would write, less
    the figures' comment (the diff shown without --write)."""
    return candidate_text(loaded.text, loaded.profile, knobs)


def figure(standing: Standing | None, goal: Goal) -> str:
    """A candidate's figure (the median of its draws) with its spread, as the winner line and the profile's
    comment say it: a figure without its spread is how the old search ranked noise (issue 26)."""
    if standing is None or standing.figure is None:
        return "not measured"
    return f"{goal.metric}@{goal.concurrency} {standing.figure:.2f} {goal.unit} ({spread_said(standing)})"
