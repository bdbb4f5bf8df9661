"""What every planner reads: the profile and what it renders to on this host, computed once per plan.

A planner is `(desired, observed, planned) -> tuple[Step, ...]`: pure, given the steps planned
before it (in plan order), returning its own steps (none, one or several).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.plan import Step
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.specs import ImageBuild, Payload
from kimik3_reconciler.planning.launch import Launch


@dataclass(frozen=True)
class Desired:
    """The profile, the image build it renders and the container it launches."""

    profile: Profile
    build: ImageBuild
    launch: Launch


Planner = Callable[[Desired, Observed, tuple[Step, ...]], tuple[Step, ...]]


def changes(planned: tuple[Step, ...], *payloads: type[Payload]) -> bool:
    """Does a step planned so far change something with one of these payloads?"""
    return any(step.changes and isinstance(step.spec, payloads) for step in planned)
