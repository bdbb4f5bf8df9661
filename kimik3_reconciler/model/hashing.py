"""Canonical hashing: the per-layer fingerprints stamped on images and containers as labels."""

from __future__ import annotations

import hashlib
import json
from typing import Any

FINGERPRINT_LENGTH = 16


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace, so equal values hash equally."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def fingerprint(value: Any) -> str:
    """A short stable digest of `value` (64 bits of sha256 are plenty to detect drift)."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()[:FINGERPRINT_LENGTH]
