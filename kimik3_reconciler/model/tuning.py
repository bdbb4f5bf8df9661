"""Tune's values (pure): the goal and how a bench level scores on it, the search space, a trial, and the
resumable search record kept in state."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from kimik3_reconciler.errors import InputError
from kimik3_reconciler.model.bench import LevelResult

_GOAL = re.compile(r"^(decode|aggregate|ttft-p95)(?:@(\d+))?((?:,(?:ttft-p95<=|decode>=)[0-9.]+)*)$")


@dataclass(frozen=True)
class Goal:
    """What tune maximises: `decode` (per-request decode tok/s, c1 by default), `aggregate` (tok/s at cN),
    `ttft-p95` (seconds at cN, minimised); optionally subject to p95 TTFT <= max_ttft_p95 seconds and to a
    decode floor, per-request decode tok/s at cN >= min_decode (a latency goal that keeps streams readable)."""

    metric: str
    concurrency: int
    max_ttft_p95: float | None = None
    min_decode: float | None = None

    def __str__(self) -> str:
        bound = f",ttft-p95<={self.max_ttft_p95:g}" if self.max_ttft_p95 is not None else ""
        floor = f",decode>={self.min_decode:g}" if self.min_decode is not None else ""
        return f"{self.metric}@{self.concurrency}{bound}{floor}"

    @property
    def minimised(self) -> bool:
        return self.metric == "ttft-p95"

    @property
    def unit(self) -> str:
        return "s" if self.metric == "ttft-p95" else "tok/s"

    def figure(self, level: LevelResult | None) -> float | None:
        """The goal's figure as measured (tok/s or seconds), None when the level has none."""
        if level is None or level.errors:
            return None
        return {"decode": level.decode_p50, "aggregate": level.aggregate or None, "ttft-p95": level.ttft_p95}[
            self.metric
        ]

    def score(self, level: LevelResult | None) -> float | None:
        """Higher is better; None = infeasible (errors, nothing measured, or the TTFT bound broken)."""
        figure = self.figure(level)
        if figure is None or level is None:
            return None
        if self.broken(level):
            return None
        return -figure if self.metric == "ttft-p95" else figure

    def broken(self, level: LevelResult) -> str | None:
        """Which bound this level breaks, or None."""
        if self.max_ttft_p95 is not None and (level.ttft_p95 is None or level.ttft_p95 > self.max_ttft_p95):
            return f"the TTFT bound is broken (p95 {level.ttft_p95} s > {self.max_ttft_p95:g} s)"
        if self.min_decode is not None and (level.decode_p50 is None or level.decode_p50 < self.min_decode):
            return f"the decode floor is broken ({level.decode_p50} tok/s < {self.min_decode:g})"
        return None


def parse_goal(text: str) -> Goal:
    match = _GOAL.match(text.strip().replace(" ", ""))
    if not match:
        raise InputError(
            f"--goal {text!r}: expected decode[@1], aggregate@N, ttft-p95@N, or one of them with "
            "',ttft-p95<=SECONDS' and/or ',decode>=TOK_S' (e.g. aggregate@8,ttft-p95<=2.5)"
        )
    metric, at, bounds = match.groups()
    limits: dict[str, float] = {}
    for bound in filter(None, bounds.split(",")):
        name, value = re.split(r"<=|>=", bound)
        if name in limits:
            raise InputError(f"--goal {text!r}: {name} is bounded twice")
        try:
            limits[name] = float(value)
        except ValueError:
            raise InputError(f"--goal {text!r}: {bound!r} needs a number") from None
    if metric != "decode" and at is None:
        raise InputError(f"--goal {text!r}: {metric} needs a concurrency, e.g. {metric}@8")
    concurrency = int(at or 1)
    if concurrency < 1:
        raise InputError(f"--goal {text!r}: the concurrency must be at least 1")
    return Goal(metric, concurrency, limits.get("ttft-p95"), limits.get("decode"))


FIT = "fit"  # KNOB=fit: the engine's own choice (llama.cpp's n_cpu_moe: --fit sizes the split; written back unset)


class KnobNames(Protocol):
    """The engine's tune knobs as --space reads them (engines/base.py TuneKnobs)."""

    @property
    def section(self) -> str: ...  # the profile section the knobs live in
    @property
    def names(self) -> tuple[str, ...]: ...  # the knobs --space takes
    @property
    def automatic(self) -> tuple[str, ...]: ...  # the knobs that also take FIT (unset: the engine decides)


def parse_space(items: tuple[str, ...], knobs: KnobNames) -> dict[str, tuple[Any, ...]]:
    """`--space ubatch=512,1024 --space parallel=1,2 --space n_cpu_moe=fit,24,32`: knob -> values. `knobs`: the
    engine's tune knobs (engines/base.py TuneKnobs: llama.cpp's serve fields, vLLM's vllm fields, ...). Values are
    numbers (an automatic knob also `fit`; load_mode: words), each checked against the section's schema."""
    section, names = knobs.section, knobs.names
    space: dict[str, tuple[Any, ...]] = {}
    for item in items:
        knob, _, values = item.partition("=")
        knob = knob.strip().replace("-", "_")
        if knob not in names or not values:
            raise InputError(
                f"--space {item!r}: expected KNOB=V1,V2,... with KNOB one of {', '.join(names)} ({section}.<knob>)"
            )
        words = [v.strip() for v in values.split(",") if v.strip()]
        automatic = knob in knobs.automatic
        try:
            space[knob] = (
                tuple(words)
                if knob == "load_mode"
                else tuple(FIT if automatic and v == FIT else _number(v) for v in words)
            )
        except ValueError:
            also = " (or 'fit': --fit places the experts)" if automatic else ""
            raise InputError(f"--space {item!r}: {knob} takes numbers{also}") from None
        space[knob] = _check_knob_values(item, section, knob, space[knob])
    return space


def _number(word: str) -> int | float:
    """A whole number where the word is one (ubatch=512), else a fraction (gpu_memory_utilization=0.9)."""
    try:
        return int(word)
    except ValueError:
        return float(word)


def _check_knob_values(item: str, section: str, knob: str, values: tuple[Any, ...]) -> tuple[Any, ...]:
    """Refuse, before tune takes the lock or reads the host, a value the profile itself refuses for
    <section>.<knob> (`ubatch=0`, `parallel=-1`, `load_mode=mmap`, `gpu_memory_utilization=1.5`) or a value listed
    twice: these used to pass, and tune then locked the host, demanded a converged deployment and recorded a search
    whose candidates were all "never launched" (exit 1). The bounds are the profile schema's own (the section's
    model in model/profile_schema.py: ServeSpec, VllmSpec, ...). The values as the schema keeps them: `1` for a
    fraction is 1.0, as the running container's launch inputs say it (the search tells candidates apart by value)."""
    from pydantic import ValidationError

    spec = section_model(section)
    if len(set(values)) != len(values):
        raise InputError(f"--space {item!r}: lists a value twice")

    def checked(value: Any) -> Any:
        if knob == "threads" or value == FIT:
            return value  # threads: judged against the host's physical cores (planning/tune_space.check_candidate)
        if knob == "load_mode" and value not in ("none", "dio"):
            # The profile's rule (seed 000: a mapped model is a 20+-minute first-request stall), said up front.
            raise InputError(
                f"--space {item!r}: load_mode is none or dio (seed 000: --load-mode none; a mapped "
                f"mode stalls the first request), not {value!r}"
            )
        try:
            return getattr(spec.model_validate({knob: value}, strict=isinstance(value, float)), knob)
        except ValidationError as exc:
            raise InputError(f"--space {item!r}: {knob}={value}: {exc.errors()[0]['msg']} ({section}.{knob})") from None

    return tuple(checked(value) for value in values)


def section_model(section: str) -> Any:
    """The schema model of a profile section by its key (`serve` -> ServeSpec, `vllm` -> VllmSpec): read off the
    Profile model's field, so an engine's section needs no entry here."""
    from typing import get_args

    from pydantic import BaseModel

    from kimik3_reconciler.model.profile_schema import Profile

    annotation = Profile.model_fields[section].annotation
    return next(a for a in (annotation, *get_args(annotation)) if isinstance(a, type) and issubclass(a, BaseModel))


def candidates(space: dict[str, tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Every combination of the space's values (the space tune samples from; never all launched)."""
    knobs = sorted(space)
    return [dict(zip(knobs, values)) for values in itertools.product(*(space[k] for k in knobs))]


def knob_id(knobs: dict[str, Any]) -> str:
    return json.dumps(knobs, sort_keys=True)


@dataclass
class Trial:
    """One draw: a launch of a candidate (none for the profile as written while the host runs it), the warm-up and
    one bench. `stage` 1 = the search (the split, one knob at a time, the neighbour), 2 = the final rounds, which
    relaunch the best few and the profile as written alternately until they are told apart; `step` says why."""

    knobs: dict[str, Any]
    stage: int
    status: str  # "running" (launched, no result yet: a kill interrupted it) | "ok" | "failed"
    score: float | None = None
    figure: float | None = None
    ttft_p95: float | None = None
    seconds: float | None = None
    detail: str = ""
    bench_key: str | None = None  # the median draw's bench
    figures: list[float | None] = field(default_factory=list)  # the bench's figure (one a draw)
    step: str = ""  # why it was drawn: "as written", "split", "ubatch", "neighbour", "final 2", ...


def search_key(profile: str, text: str, goal: Goal, space: dict[str, tuple[Any, ...]], settings: dict[str, Any]) -> str:
    """The record of one search: the same profile text, goal, space and bench settings resume it."""
    digest = hashlib.sha256(
        json.dumps([text, str(goal), {k: list(v) for k, v in sorted(space.items())}, settings], sort_keys=True).encode()
    ).hexdigest()[:16]
    return f"tune/{profile}/{digest}.json"


def trials_to_json(trials: list[Trial]) -> list[dict[str, Any]]:
    return [asdict(t) for t in trials]


def trials_from_json(data: list[dict[str, Any]]) -> list[Trial]:
    return [Trial(**t) for t in data]
