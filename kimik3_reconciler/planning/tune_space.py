"""Tune's search space and its candidate check (pure): which knob values to try on this host, and whether
kimik3 would launch a candidate at all. A candidate that the seed rules, the planner's host gate or the
placement forecast refuse is never loaded: refusing costs nothing, a load costs minutes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kimik3_reconciler.engines import ServingEngine, engine_for
from kimik3_reconciler.engines.base import TuneKnobs
from kimik3_reconciler.errors import PlanError, ProfileError
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_edit import set_knobs
from kimik3_reconciler.model.profile_source import LoadedProfile, parse_profile
from kimik3_reconciler.model.tuning import FIT
from kimik3_reconciler.planning import refuse_by_host_gate

MIB = 1 << 20


def default_space(engine: ServingEngine, profile: Profile, observed: Observed) -> dict[str, tuple[Any, ...]]:
    """The knobs worth searching for this profile on this host: the engine's (engines/base.py `tune_space`)."""
    return engine.tune_space(profile, observed)


def candidate_text(text: str, profile: Profile, knobs: dict[str, Any], note: str | None = None) -> str:
    """The profile text of a candidate: its knobs written into the engine's section (engines/base.py TuneKnobs:
    serve for llama.cpp, vllm, sglang), comments and key order kept; `note`: a comment above that section."""
    section = engine_for(profile.engine).tune_knobs.section
    return set_knobs(text, section, section_values(profile, knobs), note)


def section_values(profile: Profile, knobs: dict[str, Any]) -> dict[str, Any]:
    """The fields a candidate writes: its knobs (an automatic one searched as FIT leaves the section: the engine
    decides), and the fields the engine raises to a searched knob when they are not searched (TuneKnobs.raised)."""
    tune = engine_for(profile.engine).tune_knobs
    values = {k: v for k, v in knobs.items() if k != "threads"}  # load_mode is serve.load_mode (none or dio)
    for name in tune.automatic:
        if values.get(name) == FIT:
            values[name] = None
    section = getattr(profile, tune.section)
    for name, knob in tune.raised:
        written = getattr(section, name, None)
        if knob in values and name not in values and written is not None:
            values[name] = max(written, values[knob])
    return values


@dataclass(frozen=True)
class Verdict:
    """A candidate's check: the profile to launch, or why it is never launched."""

    loaded: LoadedProfile | None
    refusal: str | None = None


def check_candidate(text: str, base: Profile, knobs: dict[str, Any], observed: Observed, slot_tokens: int) -> Verdict:
    """Would kimik3 launch this candidate here? `slot_tokens`: prompt + output tokens one request needs."""
    threads = knobs.get("threads")
    if threads is not None and threads != observed.host.physical_cores:
        # rule: fixed-flags
        # Seed 000: --threads/--threads-batch = the physical core count is a hardware requirement, not a
        # tuning choice; only the host's own count is ever launched.
        return Verdict(
            None,
            f"threads={threads}: seed 000 fixes --threads to the physical cores "
            f"({observed.host.physical_cores} here), not a tuning choice",
        )
    load_mode = knobs.get("load_mode")
    if load_mode is not None and load_mode not in ("none", "dio"):
        # rule: fixed-flags
        # Seed 000: --load-mode none is required (a mapped model measured as a 20+ minute single-request
        # stall); dio reads the same bytes up front (serve.load_mode, issue 15).
        return Verdict(None, f"load_mode={load_mode}: seed 000 requires --load-mode none (or dio)")
    source = "tune candidate " + ", ".join(f"{k}={v}" for k, v in sorted(knobs.items()))
    try:
        loaded = parse_profile(candidate_text(text, base, knobs), source=source)
    except ProfileError as exc:  # the seed rules (profile_rules.check_rules) and the schema
        return Verdict(None, "; ".join(f"{p.field}: {p.message}" if p.field else p.message for p in exc.problems))
    profile, engine = loaded.profile, engine_for(loaded.profile.engine)
    trained = observed.layout.context_length or None if observed.layout is not None else None  # the model's header
    room, said = engine.request_room(profile, trained)
    if room < slot_tokens:  # every request of the candidate's bench would fail (or be cut): never launched
        return Verdict(None, f"{said} = {room} tokens, a request needs {slot_tokens}")
    rendered = engine.render_plan(profile, observed)  # the candidate's plan, once: the gate and the forecast read it
    try:
        refuse_by_host_gate(profile, observed, rendered)
    except PlanError as exc:
        return Verdict(None, str(exc).replace("\n", " "))
    placement = rendered.forecast
    if placement is not None:
        free = {f"CUDA{i}": g.memory_free for i, g in enumerate(observed.host.gpus)}
        over = [d.device for d in placement.devices if d.device in free and d.total_bytes > free[d.device]]
        if over:
            return Verdict(None, f"the placement forecast does not fit {', '.join(over)}")
        ram = observed.host.ram_available or observed.host.ram_total
        if ram and placement.host_bytes > ram:
            return Verdict(
                None,
                f"the placement forecast needs {placement.host_bytes // MIB} MiB of RAM, {ram // MIB} MiB available",
            )
    return Verdict(loaded)


def placement_key(tune: TuneKnobs, knobs: dict[str, Any]) -> tuple[Any, ...]:
    """Candidates with equal keys put the same tensors in the same places (the engine's TuneKnobs.placement): run
    them one after the other, so a load finds the weights it needs still in the page cache."""
    return tuple(-1 if knobs.get(name, -1) == FIT else knobs.get(name, -1) for name in tune.placement)


def split_rank(profile: Profile, observed: Observed, knobs: dict[str, Any]) -> tuple[Any, ...]:
    """How promising a candidate's split is before any load, lower first: the engine's rank (`split_rank`) from the
    candidate's own plan."""
    engine = engine_for(profile.engine)
    return engine.split_rank(profile, observed, engine.render_plan(profile, observed), knobs)
