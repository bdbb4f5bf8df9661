"""A profile rule's verdict on one field (Finding), and the phrases several rules' messages share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FieldPath = tuple[str | int, ...]  # a field's place in the profile: ("serve", "fit_target", 0)

NEVER_SECRETS = "a profile never contains a secret"
FIXED = "is fixed by kimik3 (seed 000: a Kimi-K3/hardware requirement, not a knob)"


@dataclass(frozen=True)
class Finding:
    """One rule's verdict on one field: an error refuses the profile, a warning is printed."""

    path: FieldPath
    message: str
    severity: Literal["error", "warning"] = "error"


def error(path: FieldPath, message: str) -> Finding:
    return Finding(path, message, "error")


def warning(path: FieldPath, message: str) -> Finding:
    return Finding(path, message, "warning")
