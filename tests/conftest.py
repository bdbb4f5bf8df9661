"""Puts tests/ on sys.path: unit and integration tests import their helpers as `support.<module>`."""

import sys
from pathlib import Path

TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
