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
import pytest  # noqa: E402
from support.background import Background  # noqa: E402
from support.hub_client import forget_hub_client  # noqa: E402

# Tests marked `dockerd_restart` are deselected unless KIMIK3_DOCKERD_RESTART_TEST=1 asks for them.
from support.opt_in import pytest_collection_modifyitems  # noqa: E402,F401  (a hook: pytest finds it by name)
from support.require_engines import pytest_runtest_makereport  # noqa: E402,F401  (a hook: pytest finds it by name)

# The order is random (pytest-randomly); its seed is printed at the start and in the summary.
from support.test_order import pytest_sessionstart, pytest_terminal_summary  # noqa: E402,F401  (hooks)


@pytest.fixture
def background():  # noqa: ANN201 - a support.background.Background
    """Start background processes through this; each one's process group is killed at teardown, passed or failed."""
    started = Background()
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture(autouse=True)
def fresh_hub_client():  # noqa: ANN201 - a generator fixture
    """Each test's in-process hub requests use a huggingface_hub client made from that test's environment: the one
    a test made (under its HTTP_PROXY, say) is closed after it (support/hub_client.py says what broke before)."""
    yield
    forget_hub_client()
