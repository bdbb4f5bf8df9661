"""A pytest hook (tests/conftest.py imports it): CI's engines stage (scripts/test-engines.sh) installs what the tests
marked `engines` need (vLLM's and SGLang's venvs, the vLLM CPU image) and sets KIMIK3_REQUIRE_ENGINES=1; there a skip
(a part missing) is reported as a failure, so the stage passes only by running them. Elsewhere they skip, saying
which part is missing."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if (
        os.environ.get("KIMIK3_REQUIRE_ENGINES") == "1"
        and report.skipped
        and not hasattr(report, "wasxfail")
        and item.get_closest_marker("engines") is not None
    ):
        said = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = said.removeprefix("Skipped: ")
        report.outcome = "failed"
        report.longrepr = f"KIMIK3_REQUIRE_ENGINES=1 (CI's engines stage) and this test skipped: {reason}"
