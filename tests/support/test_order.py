"""pytest hooks (tests/conftest.py imports them): the suite runs in a random order (pytest-randomly, a test
dependency), and its seed is printed at the start and in the summary, even under -q, so a failure that depends
on the order can be run again in that order: `python -m pytest -p randomly --randomly-seed=N ...`. `-p no:randomly`
runs the files' own order."""

from __future__ import annotations

import pytest


def _said(config: pytest.Config) -> str | None:
    if not config.pluginmanager.hasplugin("randomly") or config.getoption("randomly_dont_reorganize", False):
        return None
    seed = config.getoption("randomly_seed", None)
    return f"test order: random, seed {seed} (again in this order: -p randomly --randomly-seed={seed})"


def pytest_sessionstart(session: pytest.Session) -> None:
    said, reporter = _said(session.config), session.config.pluginmanager.get_plugin("terminalreporter")
    if said and reporter is not None:
        reporter.write_line(said)


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:  # noqa: ANN001 - pytest's reporter
    said = _said(config)
    if said:
        terminalreporter.write_line(said)
