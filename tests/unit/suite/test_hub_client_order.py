"""A test that made huggingface_hub's shared client under its own HTTP_PROXY leaves no later test going through that
proxy (tests/conftest.py's `fresh_hub_client`, support/hub_client.py). Two tests, in this order, in a pytest of
their own with this suite's conftest: the first makes the client through a proxy on a port nothing listens on (a
fixture server stopped, as test_hub_token.py's was), the second asks a running fixture hub in-process, as `kimik3
pin` through CliRunner does. Before, the second failed with "Connection refused" (CI seed 1837970960)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.ports import free_port

TESTS = Path(__file__).resolve().parents[2]

TWO_TESTS = """
import hashlib
from pathlib import Path

from huggingface_hub import HfApi
from huggingface_hub.utils import get_session

from kimik3_demo.hub import FixtureHub, FixtureRepo

REV = hashlib.sha1(b"one").hexdigest()


def test_first_makes_the_client_through_a_proxy_that_is_gone(monkeypatch) -> None:
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:{dead}")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:{dead}")
    get_session()


def test_then_a_hub_request_in_process_reaches_the_hub(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{{}}")
    with FixtureHub([FixtureRepo("k3/tiny", REV, {{"config.json": tmp_path / "config.json"}})]) as hub:
        assert HfApi(endpoint=hub.url, token=False).model_info("k3/tiny", revision="main").sha == REV
"""


def test_a_client_made_under_one_tests_proxy_is_not_used_by_the_next(tmp_path: Path) -> None:
    (tmp_path / "test_two.py").write_text(TWO_TESTS.format(dead=free_port()))
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)])}
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTP_PROXY", "http_proxy"):
        environment.pop(name, None)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            "-c",
            os.devnull,
            "--rootdir",
            str(tmp_path),
            "-p",
            "conftest",
            str(tmp_path / "test_two.py"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environment,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "2 passed" in run.stdout
