"""Puts tests/ and the checkout on sys.path: tests import their helpers as `support.<module>` and the
offline demo inputs as `kimik3_demo` (which runs from the checkout and is never installed). Points kimik3's
cache dir (KIMIK3_CACHE_DIR) at a temporary folder for the whole run, so no test, nor any kimik3 process a test
starts (they inherit this environment), writes the user's ~/.cache."""

import os
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parent
for folder in (str(TESTS), str(TESTS.parent)):
    if folder not in sys.path:
        sys.path.insert(0, folder)

os.environ["KIMIK3_CACHE_DIR"] = tempfile.mkdtemp(prefix="kimik3-test-cache-")

# Tests marked `engines` fail instead of skipping under KIMIK3_REQUIRE_ENGINES=1 (CI's engines stage).
from support.require_engines import pytest_runtest_makereport  # noqa: E402,F401  (a hook: pytest finds it by name)
