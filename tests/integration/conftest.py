"""Integration-test settings that huggingface_hub reads at import time: no xet, a throwaway HF_HOME, no token;
and a host-wide lock file of this test session, so the suite neither waits for nor blocks a real kimik3 on the host.
The `hub` fixture: the demo repo's fixture hub, once a module (a module that needs another hub defines its own)."""

import os
import tempfile
from collections.abc import Iterator

import pytest

os.environ["HF_HUB_DISABLE_XET"] = "1"
os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="kimik3-hf-home-")
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
for name in ("HF_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_HUB_CACHE"):
    os.environ.pop(name, None)
os.environ["KIMIK3_HOST_LOCK"] = os.path.join(tempfile.mkdtemp(prefix="kimik3-host-lock-"), "kimik3.lock")


@pytest.fixture(scope="module")
def hub() -> Iterator:  # a kimik3_demo FixtureHub; imported late, after the settings above
    from support.realparts import demo_hub

    with demo_hub() as running:
        yield running
