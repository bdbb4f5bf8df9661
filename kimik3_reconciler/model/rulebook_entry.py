"""One entry of the rulebook (model/rulebook.py gathers the generic book and each engine's): a rule kimik3 enforces,
what it does, why, the passage it comes from, the modules that enforce it and the cases that test it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Rule:
    id: str
    kind: Literal["refuse", "warn", "force", "check"]  # check: `kimik3 verify` fails (apply reverts) or names a cause
    statement: str
    reason: str
    enforced_by: tuple[str, ...]  # the modules whose guard applies it (dotted paths); () only for an open gap
    cases: tuple[str, ...]  # test files/case files (relative to tests/) that exercise it
    seed: str = ""  # the passage it comes from ("seed 000 step 5 ..."), or where it comes from when not a seed


OWN = "not in the seeds: kimik3's own rule: "


def profile_rules(*concerns: str) -> tuple[str, ...]:
    """The generic rule modules (model/profile_rules/, one per concern) whose guards apply a rule."""
    return tuple(f"kimik3_reconciler.model.profile_rules.{concern}" for concern in concerns)
