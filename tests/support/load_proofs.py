"""The samples behind a ratio of a recorded load proof (tools/gpu_proof/load_probe.py's JSON), read again by the
tests that check its quoted ratios: a sample group is KIND/CONFIG/LOAD_MODE/CACHE."""

from __future__ import annotations


def group(samples: list[dict], key: str) -> list[dict]:
    """The samples of group `key` (KIND/CONFIG/LOAD_MODE/CACHE; a sample without a load mode is `none`, without a
    cache state `warm`)."""
    kind, config, mode, cache = key.split("/")
    return [
        s
        for s in samples
        if s["kind"] == kind
        and s["config"] == config
        and s.get("load_mode", "none") == mode
        and s.get("cache", "warm") == cache
    ]


def ratio_sides(samples: list[dict], ratio: dict) -> list[list[float]]:
    """The values of the ratio's field in its numerator's group and in its denominator's (samples without it left
    out)."""
    return [
        [s[ratio["field"]] for s in group(samples, ratio[side]) if s.get(ratio["field"]) is not None]
        for side in ("numerator", "denominator")
    ]
