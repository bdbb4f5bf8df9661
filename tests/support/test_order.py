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


class FileOrder:
    """Keeps the tests of a module marked `file_order` in the order the file writes them (pytest-randomly still
    places them among the other modules' tests). Only for a module whose tests build on one another and that has
    not been made to stand alone yet; the marker's reason says why, and each such module is a known gap."""

    # tryfirst, registered after pytest-randomly's own tryfirst wrapper: pluggy calls this one first, so `written`
    # is the collection's order, taken before pytest-randomly shuffles inside its wrapper.
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]):  # noqa: ANN201 - a pluggy hook wrapper
        written = {id(item): index for index, item in enumerate(items)}
        result = yield
        kept: dict[str, list[int]] = {}
        for place, item in enumerate(items):
            if item.get_closest_marker("file_order") is not None:
                kept.setdefault(item.nodeid.split("::")[0], []).append(place)
        for places in kept.values():
            in_file = sorted((items[place] for place in places), key=lambda item: written[id(item)])
            for place, item in zip(places, in_file):
                items[place] = item
        return result


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(FileOrder(), "kimik3-file-order")
