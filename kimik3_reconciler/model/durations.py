"""Durations as operators write them on the command line: `90`, `90s`, `3m`, `1h30m`, `500ms`."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds; a bare number is seconds. ValueError saying what is accepted otherwise."""
    cleaned = text.strip().lower()
    try:
        return _non_negative(float(cleaned))
    except ValueError:
        pass
    parts = _PART.findall(cleaned)
    if not parts or "".join(n + u for n, u in parts) != cleaned:
        raise ValueError(f"{text!r} is not a duration: write e.g. 30s, 3m, 1h30m or a number of seconds")
    return _non_negative(sum(float(number) * _UNIT_S[unit] for number, unit in parts))


def _non_negative(seconds: float) -> float:
    if not seconds >= 0:  # also refuses nan
        raise ValueError(f"{seconds} is not a duration: it must be 0 or more")
    return seconds
