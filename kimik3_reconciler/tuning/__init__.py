"""`kimik3 tune`: search the profile's knobs for the goal, measuring real launches.

1. The space (planning/tune_space.py) is checked whole before anything is loaded: a candidate the seed
   rules, the host gate or the placement forecast refuse is listed and never launched.
2. The profile as written is measured first (the host is converged on it: no load), then the predicted
   time of the whole search is printed.
3. Stage 1: optuna's TPE sampler proposes candidates in small batches; each batch runs in page-cache
   order (equal placements one after the other); each candidate is a real converge (replace, health,
   verify), a warm-up that is not counted, and a short bench at the goal's concurrency. The budget stops
   new launches.
4. Stage 2 (successive halving): the best few (and the profile as written, measured first while the host
   still runs it: no load) are launched again, warmed up, and benched `repeats` times; they are ranked by
   the median draw, so one lucky (or unlucky) bench cannot pick the winner.
Why the warm-up: the first requests after a load run cold (CUDA graphs captured, compute buffers grown to
the ubatch, the CPU experts' pages touched); measured on the H200, a candidate's single bench moved by up to
30 % between loads. The warm-up is one round of full-length prompts at the goal's concurrency with a few
output tokens, so both the prefill and the decode paths of that batch size have run once.
Every trial is written to state before it is launched and after it is measured, so a killed search
resumes where it stopped. The caller holds the host lock and converges the end state (`settle`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from kimik3_reconciler.errors import Kimik3Error
from kimik3_reconciler.model.bench import BenchSettings
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.loaded_profile import LoadedProfile
from kimik3_reconciler.model.tuning import Goal, Trial, candidates, knob_id, trials_from_json, trials_to_json
from kimik3_reconciler.planning.tune_space import check_candidate, placement_key
from kimik3_reconciler.ports import ClockPort, StatePort
from kimik3_reconciler.tuning.runner import CandidateRunner, DockerRunner

__all__ = ["CandidateRunner", "DockerRunner", "Search", "SearchResult"]

Say = Callable[[str], None]
BATCH = 3  # candidates asked of the sampler at a time, then run in page-cache order


@dataclass
class SearchResult:
    baseline: Trial | None
    winner: Trial | None  # None: nothing beat the profile as written (or nothing was measurable)
    trials: list[Trial]
    refused: list[tuple[dict[str, Any], str]]
    predicted_s: float
    winner_loaded: LoadedProfile | None = None


@dataclass
class Search:
    """One search, resumable from its state record (`key`, model/tuning.search_key)."""

    runner: CandidateRunner
    state: StatePort
    clock: ClockPort
    say: Say
    loaded: LoadedProfile
    goal: Goal
    space: dict[str, tuple[Any, ...]]
    short: BenchSettings
    long: BenchSettings
    key: str
    budget_s: float
    finalists: int = 3
    max_trials: int | None = None
    repeats: int = 3  # stage 2: benches per finalist, ranked by the median draw
    warm_up: bool = True  # a warm-up round after each converge, not counted
    trials: list[Trial] = field(default_factory=list)

    # --- the record -------------------------------------------------------------------------------
    def _save(self, **extra: Any) -> None:
        record = self.state.read(self.key) or {}
        record.update(profile=self.loaded.profile.name, goal=str(self.goal),
                      space={k: list(v) for k, v in self.space.items()}, trials=trials_to_json(self.trials), **extra)
        self.state.write(self.key, record)

    def _done(self, knobs: dict[str, Any], stage: int) -> Trial | None:
        return next((t for t in self.trials if t.stage == stage and knob_id(t.knobs) == knob_id(knobs)
                     and t.status != "running"), None)

    # --- one trial --------------------------------------------------------------------------------
    def _run(self, knobs: dict[str, Any], loaded: LoadedProfile, stage: int) -> Trial:
        done = self._done(knobs, stage)
        if done is not None:
            return done
        self.trials = [t for t in self.trials if not (t.stage == stage and knob_id(t.knobs) == knob_id(knobs))]
        trial = Trial(knobs, stage, "running")
        self.trials.append(trial)
        self._save()  # launched-but-unmeasured is on disk before the launch: a kill -9 reruns it
        started = self.clock.monotonic()
        settings, draws = (self.short, 1) if stage == 1 else (self.long, max(1, self.repeats))
        try:
            self.runner.converge(loaded)
            if self.warm_up:  # not counted: the first requests after a load run cold
                self.runner.warm_up(loaded, warm_up_settings(self.short))
            measured = [self.runner.measure(loaded, settings) for _ in range(draws)]
        except Kimik3Error as exc:  # a failed candidate is a result, not the end of the search
            trial.status, trial.detail = "failed", str(exc).splitlines()[0][:300]
        else:
            levels = [(run.level(self.goal.concurrency), key) for run, key in measured]
            trial.figures = [self.goal.figure(level) for level, _ in levels]
            level, key = median_draw(levels, self.goal.score)
            trial.status, trial.bench_key = "ok", key
            trial.score, trial.figure = self.goal.score(level), self.goal.figure(level)
            trial.ttft_p95 = level.ttft_p95 if level else None
            if trial.score is None:
                trial.detail = (level.first_error or "the TTFT bound is broken") if level else "no level measured"
        trial.seconds = round(self.clock.monotonic() - started, 2)
        self._save()
        draws_said = (" (median of " + ", ".join("-" if f is None else f"{f:.2f}" for f in trial.figures) + ")"
                      if len(trial.figures) > 1 else "")
        self.say(f"  {'stage 2' if stage == 2 else 'trial'} {_knobs(knobs)}: {_outcome(trial, self.goal)}"
                 f"{draws_said} ({trial.seconds:.0f} s)")
        return trial

    # --- the search -------------------------------------------------------------------------------
    def run(self, observed: Observed, baseline_knobs: dict[str, Any]) -> SearchResult:
        record = self.state.read(self.key)
        if record and record.get("trials"):
            self.trials = trials_from_json(record["trials"])
            self.say(f"resuming the search {self.key}: {sum(t.status != 'running' for t in self.trials)} "
                     "trial(s) already measured")
        slot_tokens = max(self.short.prompt_tokens + self.short.output_tokens,
                          self.long.prompt_tokens + self.long.output_tokens)
        feasible: dict[str, tuple[dict[str, Any], LoadedProfile]] = {}
        refused: list[tuple[dict[str, Any], str]] = []
        for knobs in candidates(self.space):
            verdict = check_candidate(self.loaded.text, self.loaded.profile, knobs, observed, slot_tokens)
            if verdict.loaded is None:
                refused.append((knobs, verdict.refusal or "refused"))
            else:
                feasible[knob_id(knobs)] = (knobs, verdict.loaded)
        for knobs, why in refused:
            self.say(f"  never launched: {_knobs(knobs)}: {why}")
        if not feasible:
            self.say("no candidate of the space can be launched here: the profile stays as written")
            return SearchResult(None, None, self.trials, refused, 0.0)

        baseline = self._run(baseline_knobs, self.loaded, 1)  # the host is on it already: no load
        self._run(baseline_knobs, self.loaded, 2)  # its stage 2 now, while it runs: one load fewer later
        per_candidate = self.runner.load_seconds(self.loaded, observed) + (baseline.seconds or 0.0)
        stage1 = self._trial_count(len(feasible), per_candidate)
        predicted = per_candidate * (stage1 + self.finalists * self._stage2_cost())
        self.say(f"the search: {len(feasible)} launchable candidate(s), {len(refused)} refused without a load; "
                 f"{stage1} short trial(s) then the best {self.finalists} longer; predicted {_minutes(predicted)} "
                 f"(~{per_candidate:.0f} s a candidate: load, verify, bench), budget {_minutes(self.budget_s)}")
        self._save(predicted_s=predicted, started=self.clock.now().isoformat(timespec="seconds"))
        self._stage1(feasible, stage1, baseline_knobs, per_candidate)
        return self._stage2(feasible, baseline_knobs, refused, predicted)

    def _stage2_cost(self) -> float:
        """A finalist's cost in short trials: its `repeats` longer benches against one short bench."""
        return max(1, self.repeats) * self.long.requests() / max(1, self.short.requests())

    def _trial_count(self, feasible: int, per_candidate: float) -> int:
        """A third of the space (at least 3): the search must cost far less than the exhaustive grid; fewer
        when the budget cannot pay for them."""
        wanted = self.max_trials or max(3, math.ceil(feasible / 3))
        affordable = int(self.budget_s // per_candidate) if per_candidate > 0 else wanted
        return max(1, min(feasible, wanted, affordable))

    def _stage1(self, feasible: dict[str, tuple[dict[str, Any], LoadedProfile]], count: int,
                baseline_knobs: dict[str, Any], per_candidate: float) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        dists = {k: optuna.distributions.CategoricalDistribution(list(v)) for k, v in self.space.items()}
        study = optuna.create_study(direction="maximize",
                                    sampler=optuna.samplers.TPESampler(seed=0, n_startup_trials=min(4, count)))
        worst = self._worst()
        for t in self.trials:  # what a killed search (and the baseline) already measured
            if t.stage == 1 and t.status != "running" and knob_id(t.knobs) in feasible:
                study.add_trial(optuna.trial.create_trial(params=t.knobs, distributions=dists,
                                                          value=t.score if t.score is not None else worst))
        started = self.clock.monotonic()
        measured = {knob_id(t.knobs) for t in self.trials if t.stage == 1 and t.status != "running"}
        measured.add(knob_id(baseline_knobs))
        order = sorted(feasible, key=lambda k: placement_key(feasible[k][0]))
        for t in [t for t in self.trials if t.stage == 1 and t.status == "running"]:
            kid = knob_id(t.knobs)  # launched when the search was killed: it was chosen, so it runs first
            if kid in feasible and kid not in measured:
                ask = self._enqueued(study, dists, t.knobs)
                trial = self._run(t.knobs, feasible[kid][1], 1)
                measured.add(kid)
                study.tell(ask, trial.score if trial.score is not None else self._worst())
        while len(measured) < count + 1 and len(measured) < len(feasible) + 1:
            if self.clock.monotonic() - started + per_candidate > self.budget_s:
                self.say(f"the budget ({_minutes(self.budget_s)}) is spent: no more launches")
                break
            batch = self._ask(study, dists, feasible, measured, order, min(BATCH, count + 1 - len(measured)))
            if not batch:
                break
            for ask, knobs in sorted(batch, key=lambda pair: placement_key(pair[1])):
                trial = self._run(knobs, feasible[knob_id(knobs)][1], 1)
                measured.add(knob_id(knobs))
                study.tell(ask, trial.score if trial.score is not None else self._worst())
            launched = [t.seconds for t in self.trials
                        if t.stage == 1 and t.seconds and knob_id(t.knobs) != knob_id(baseline_knobs)]
            if launched:  # the prediction, corrected by what the launches really cost
                per_candidate = sum(launched) / len(launched)
                left = max(0, count + 1 - len(measured)) + self.finalists * self._stage2_cost()
                self.say(f"  ~{per_candidate:.0f} s a candidate as measured: ~{_minutes(per_candidate * left)} left")

    def _ask(self, study: Any, dists: dict[str, Any], feasible: dict[str, Any], measured: set[str],
             order: list[str], size: int) -> list[tuple[Any, dict[str, Any]]]:
        """Up to `size` new launchable candidates from the sampler; a refused or repeated proposal is told
        back at once (no load), and after many repeats the next unmeasured one in page-cache order is taken."""
        import optuna

        batch: list[tuple[Any, dict[str, Any]]] = []
        chosen: set[str] = set()
        for _ in range(40 * size):
            if len(batch) == size:
                break
            ask = study.ask(dists)
            knobs, kid = dict(ask.params), knob_id(ask.params)
            if kid in feasible and kid not in measured and kid not in chosen:
                batch.append((ask, knobs))
                chosen.add(kid)
            else:
                study.tell(ask, state=optuna.trial.TrialState.PRUNED)
        for kid in order:  # the sampler keeps repeating itself (a small space): walk the rest in order
            if len(batch) == size:
                break
            if kid not in measured and kid not in chosen:
                knobs = feasible[kid][0]
                batch.append((self._enqueued(study, dists, knobs), knobs))
                chosen.add(kid)
        return batch

    @staticmethod
    def _enqueued(study: Any, dists: dict[str, Any], knobs: dict[str, Any]) -> Any:
        study.enqueue_trial(knobs)  # the next ask returns exactly these values
        return study.ask(dists)

    def _worst(self) -> float:
        scores = [t.score for t in self.trials if t.score is not None]
        return (min(scores) - abs(min(scores)) - 1.0) if scores else -1e9

    def _stage2(self, feasible: dict[str, tuple[dict[str, Any], LoadedProfile]], baseline_knobs: dict[str, Any],
                refused: list[tuple[dict[str, Any], str]], predicted: float) -> SearchResult:
        ranked = sorted((t for t in self.trials if t.stage == 1 and t.score is not None),
                        key=lambda t: t.score or 0.0, reverse=True)
        finalists = ranked[:self.finalists]
        baseline_first = self._done(baseline_knobs, 1)
        if baseline_first is not None and baseline_first not in finalists:
            finalists.append(baseline_first)  # the winner is compared with the profile as written like for like
        if finalists:
            self.say(f"stage 2: the best {self.finalists} and the profile as written: {max(1, self.repeats)} "
                     f"bench(es) of {self.long.requests()} requests each, ranked by the median")
        for trial in sorted(finalists, key=lambda t: placement_key(t.knobs)):
            kid = knob_id(trial.knobs)
            loaded = self.loaded if kid == knob_id(baseline_knobs) else feasible[kid][1]
            self._run(trial.knobs, loaded, 2)
        final = sorted((t for t in self.trials if t.stage == 2 and t.score is not None),
                       key=lambda t: t.score or 0.0, reverse=True)
        baseline = self._done(baseline_knobs, 2)
        winner = final[0] if final else None
        if winner is not None and knob_id(winner.knobs) == knob_id(baseline_knobs):
            winner = None  # the profile as written is the best: nothing to change
        winner_loaded = feasible[knob_id(winner.knobs)][1] if winner else None
        self._save(finished=True, winner=winner.knobs if winner else None)
        return SearchResult(baseline, winner, self.trials, refused, predicted, winner_loaded)


def _knobs(knobs: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(knobs.items())) or "(as written)"


def _outcome(trial: Trial, goal: Goal) -> str:
    if trial.status == "failed":
        return f"failed: {trial.detail}"
    if trial.score is None:
        return f"not counted: {trial.detail}"
    ttft = f", TTFT p95 {trial.ttft_p95:.2f} s" if trial.ttft_p95 is not None else ""
    return f"{goal.metric}@{goal.concurrency} {trial.figure:.2f} {goal.unit}{ttft}"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def median_draw(draws: list[tuple[Any, str]], score: Callable[[Any], float | None]) -> tuple[Any, str]:
    """The median of a candidate's benches by the goal's score (an infeasible draw ranks lowest; of an even
    count, the lower middle one: a finalist is never credited with its better half)."""
    ranked = sorted(draws, key=lambda draw: _rank(score(draw[0])))
    return ranked[(len(ranked) - 1) // 2]


def _rank(score: float | None) -> float:
    return -math.inf if score is None else score


def warm_up_settings(short: BenchSettings) -> BenchSettings:
    """One round at the goal's concurrency: full-length prompts (the prefill at this ubatch), a few tokens out
    (the decode at this batch size); never counted."""
    return replace(short, prompts=1, repetitions=1, output_tokens=min(16, short.output_tokens))


def with_settings(settings: BenchSettings, goal: Goal, prompts: int, repetitions: int) -> BenchSettings:
    """A bench at the goal's concurrency only: tune compares candidates there, nothing else."""
    return replace(settings, grid=(goal.concurrency,), prompts=prompts, repetitions=repetitions)
