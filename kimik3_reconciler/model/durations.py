"""Durations as operators write them on the command line: `90`, `90s`, `3m`, `1h30m`, `500ms`."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
# The longest duration taken: a reconcile interval or lock wait of `99999999999999999999h` (or `inf`) passed the
# parser and ended in a traceback at the first wait (OverflowError: timestamp out of range for platform time_t).
MAX_S = 366 * 24 * 3600.0


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
    if seconds > MAX_S:  # also refuses inf
        raise ValueError(f"{seconds:g} s is not a duration kimik3 waits: at most {MAX_S / 86400:g} days")
    return seconds
