"""How a fleet file is told from a profile: `kind: Fleet` at its top level (a profile has no `kind`); PURE, no
imports beyond `re`, so `kimik3 validate` of a profile does not load the fleet package."""

from __future__ import annotations

import re

_FLEET_KIND = re.compile(r"^kind:[ \t]*[\"']?Fleet[\"']?[ \t]*(#.*)?$", re.MULTILINE)


def is_fleet_text(text: str) -> bool:
    """Does this YAML say `kind: Fleet` at its top level (a fleet file, not a profile)?"""
    return _FLEET_KIND.search(text) is not None
