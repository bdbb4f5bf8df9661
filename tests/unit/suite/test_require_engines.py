"""CI's engines stage cannot pass by skipping: under KIMIK3_REQUIRE_ENGINES=1 a test marked `engines` that skips (its
vLLM/SGLang part missing) fails, naming the reason; without it the test skips; unmarked tests keep their skips.
Runs pytest itself (pytester) on a small file with tests/support/require_engines.py's hook."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

TESTS = """
import pytest

@pytest.mark.engines
@pytest.mark.skipif(True, reason="no vLLM venv at /nowhere")
def test_needs_vllm():
    pass

@pytest.mark.engines
def test_has_its_part():
    assert True

@pytest.mark.skipif(True, reason="not an engines test")
def test_other_skip():
    pass
"""
CONFTEST = "from support.require_engines import pytest_runtest_makereport  # noqa: F401\n"


@pytest.mark.parametrize("required", [False, True])
def test_an_engines_skip_fails_only_when_required(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, required: bool
) -> None:
    if required:
        monkeypatch.setenv("KIMIK3_REQUIRE_ENGINES", "1")
    else:
        monkeypatch.delenv("KIMIK3_REQUIRE_ENGINES", raising=False)
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nmarkers =\n    engines: needs vLLM/SGLang parts\n")
    pytester.makepyfile(test_parts=TESTS)
    result = pytester.runpytest("-rs")
    if required:
        # a skipif skips at setup: reported as an error there (pytest.skip() in the test body: a failure)
        result.assert_outcomes(passed=1, errors=1, skipped=1)
        assert result.ret != 0
        result.stdout.fnmatch_lines(["*KIMIK3_REQUIRE_ENGINES=1*skipped: no vLLM venv at /nowhere*"])
    else:
        result.assert_outcomes(passed=1, skipped=2)
        assert result.ret == 0
