"""What every planner reads: the profile and what it renders to on this host, computed once per plan.

A planner is `(desired, observed, planned) -> tuple[Step, ...]`: pure, given the steps planned
before it (in plan order), returning its own steps (none, one or several).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from kimik3_reconciler.engines import ServingEngine
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.plan import Step
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.specs import ImageBuild, Payload
from kimik3_reconciler.planning.launch import Launch

if TYPE_CHECKING:  # planning/engine_plan.py imports the gate's modules, which import this one
    from kimik3_reconciler.planning.engine_plan import PlanOnHost

T = TypeVar("T")


@dataclass(frozen=True)
class Desired:
    """The profile, the image build it renders, the container it launches, the serving engine it names and what
    that engine's plan holds beside them."""

    profile: Profile
    build: ImageBuild | None  # None where the engine pulls its image (image_source.kind "pull"): nothing is built
    launch: Launch
    engine: ServingEngine  # what differs between llama.cpp, vLLM and SGLang (engines/base.py)
    # The mode, forecast and routes, rendered once with it (render_desired; None: a tool's Desired). Derived from the
    # profile and the observation, as the launch is: not part of its value (two renders of one input are equal).
    plan: PlanOnHost | None = field(default=None, compare=False, repr=False)
    # Answers several planners ask of one plan (the container's steps planned alone, whether the build pre-reads),
    # each computed once: made with this Desired (render_desired: one per plan) and gone with it; not its value.
    _answers: dict[str, tuple[Observed, Any]] = field(default_factory=dict, init=False, compare=False, repr=False)

    def answer(self, question: str, observed: Observed, compute: Callable[[], T]) -> T:
        """`compute()`'s value for `question`, computed once for this Desired and this observation (the same
        object: a Desired planned against another observation computes afresh)."""
        known = self._answers.get(question)
        if known is not None and known[0] is observed:
            return known[1]
        value = compute()
        self._answers[question] = (observed, value)
        return value


Planner = Callable[[Desired, Observed, tuple[Step, ...]], tuple[Step, ...]]


def changes(planned: tuple[Step, ...], *payloads: type[Payload]) -> bool:
    """Does a step planned so far change something with one of these payloads?"""
    return any(step.changes and isinstance(step.spec, payloads) for step in planned)
