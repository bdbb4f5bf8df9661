"""A pytest hook (tests/conftest.py imports it): tests marked `dockerd_restart` stop and start the host's one Docker
daemon, and so every other container on it. They are deselected unless asked for with KIMIK3_DOCKERD_RESTART_TEST=1
(run them alone, on a host nobody else uses: see tests/integration/test_faults_dockerd_restart.py)."""

from __future__ import annotations

import os

import pytest

RESTART_ENV = "KIMIK3_DOCKERD_RESTART_TEST"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(RESTART_ENV) == "1":
        return
    # Deselected, not skipped: the default suite (scripts/test.sh, CI) never collects a test that restarts dockerd.
    restarting = [item for item in items if item.get_closest_marker("dockerd_restart") is not None]
    if restarting:
        config.hook.pytest_deselected(items=restarting)
        items[:] = [item for item in items if item.get_closest_marker("dockerd_restart") is None]
