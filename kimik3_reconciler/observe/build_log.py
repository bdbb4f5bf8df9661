"""What an image build's log says about the build (pure): whether it compiled, or Docker's layer cache answered."""

from __future__ import annotations

import re
from collections.abc import Iterable

# cmake's progress lines, Make's `[ 42%] Building CXX object …` and Ninja's `[17/230] Linking CXX executable …`:
# printed only by a RUN that compiles. A cached compile step prints ` ---> Using cache` (the classic builder
# kimik3 drives) and none of them.
_COMPILE_LINE = re.compile(r"^\s*\[\s*\d+(?:%|/\d+)\]\s+(?:Building|Linking)\b")


def compiled(lines: Iterable[str]) -> bool:
    """Did this build compile anything (else every compile step came from Docker's layer cache)?"""
    return any(_COMPILE_LINE.match(line) for line in lines)
