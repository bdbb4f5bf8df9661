"""Puts tests/ and the checkout on sys.path: tests import their helpers as `support.<module>` and the
offline demo inputs as `kimik3_demo` (which runs from the checkout and is never installed)."""

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
for folder in (str(TESTS), str(TESTS.parent)):
    if folder not in sys.path:
        sys.path.insert(0, folder)
