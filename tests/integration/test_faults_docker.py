"""Faults against real parts (dockerd, the CPU image, the fixture hub, the real `kimik3`): a launch that
cannot load is stopped with its cause named, a foreign listener on the port is refused before anything
runs, and a revert finds the last good profile's relative paths from another folder.

Names and ports are this module's own (k3-fault-*, 19250-19259): other developers share the daemon.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.demo_work import truncated_hub
from support.realparts import (
    DEMO_DIR,
    demo_profile,
    docker,
    kimik3,
    remove_leftovers,
    write_profile,
)

from kimik3_demo.hub import FixtureHub

pytestmark = pytest.mark.docker

BAD, REVERT = "k3-fault-badgguf", "k3-fault-revert"
BAD_PORT, LISTENER_PORT, REVERT_PORT = 19250, 19251, 19252


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FixtureHub]:
    """The demo repo plus UD-TRUNC: one shard cut to a third, which downloads and verifies but cannot load."""
    with truncated_hub(tmp_path_factory.mktemp("fault-hub")) as running:
        yield running


@pytest.fixture
def cleanup() -> Iterator[list[str]]:
    """Containers the test makes (only ours): each removed when named (a leftover of an earlier run killed before
    its teardown: the test converges from nothing) and again when the test ends, whatever happened."""
    names: list[str] = []
    yield names
    for name in names:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def status_of(name: str) -> tuple[str, int]:
    state, restarts = docker("inspect", "-f", "{{.State.Status}} {{.RestartCount}}", name).split()
    return state, int(restarts)


def test_a_truncated_gguf_is_stopped_not_crash_looping_and_named(
    tmp_path: Path, hub: FixtureHub, cleanup: list[str]
) -> None:
    cleanup.append(BAD)
    remove_leftovers(BAD)
    profile = demo_profile(tmp_path, BAD, BAD_PORT, hub.url)
    profile["model"]["quant"] = "UD-TRUNC"
    write_profile(tmp_path, profile)
    result = kimik3(tmp_path, "apply", "profile.yaml", check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"container {BAD} failed while loading the model: the GGUF could not be read" in result.stderr
    assert "[bad-gguf: " in result.stderr and ", stopped]" in result.stderr
    assert "--- last log lines ---" in result.stderr and "exiting due to model loading error" in result.stderr
    state, restarts = status_of(BAD)
    time.sleep(3)  # unless-stopped would have restarted it by now (docker's first back-off is 100 ms)
    assert status_of(BAD) == (state, restarts) and state == "exited"
    plan = json.loads(kimik3(tmp_path, "plan", "--json", "profile.yaml").stdout)
    steps = {s["kind"]: s for s in plan["steps"]}
    assert steps["container"]["action"] == "update" and "start it" in steps["container"]["reason"]
    assert steps["health"]["reason"].startswith("wait for the model to load")


def test_a_foreign_listener_on_the_port_is_refused_naming_its_pid(tmp_path: Path, hub: FixtureHub) -> None:
    write_profile(tmp_path, demo_profile(tmp_path, "k3-fault-listener", LISTENER_PORT, hub.url))
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(LISTENER_PORT), "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while f":{LISTENER_PORT:04X} " not in Path("/proc/net/tcp").read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        for command in ("plan", "apply"):
            result = kimik3(tmp_path, command, "profile.yaml", check=False)
            assert result.returncode == 3 and "Traceback" not in result.stderr
            assert f"port {LISTENER_PORT} is held by pid {server.pid} (python" in result.stderr
        assert subprocess.run(["docker", "inspect", "k3-fault-listener"], capture_output=True).returncode != 0
    finally:
        server.terminate()
        server.wait()


def test_the_revert_finds_the_good_profiles_files_from_another_folder(
    tmp_path: Path, hub: FixtureHub, cleanup: list[str]
) -> None:
    cleanup.append(REVERT)
    remove_leftovers(REVERT)
    good_dir, bad_dir = tmp_path / "good", tmp_path / "bad"
    good_dir.mkdir(), bad_dir.mkdir()
    os.symlink(DEMO_DIR / "llama.cpp-b11434.tar.gz", good_dir / "src.tar.gz")
    good = demo_profile(tmp_path, REVERT, REVERT_PORT, hub.url)
    good["build"]["archive"] = "src.tar.gz"  # relative to good/: the revert must not look in bad/
    good["model"]["cache_dir"] = "hf-cache"
    write_profile(good_dir, good)
    kimik3(tmp_path, "apply", "good/profile.yaml")
    bad = {
        **good,
        "build": {**good["build"], "archive": str(good_dir / "src.tar.gz")},
        "model": {**good["model"], "quant": "UD-TRUNC", "cache_dir": str(good_dir / "hf-cache")},
    }
    write_profile(bad_dir, bad)
    result = kimik3(tmp_path, "apply", "bad/profile.yaml", check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "reverted to the last good profile" in result.stderr and "failed too" not in result.stderr
    assert docker("inspect", "-f", "{{.State.Status}}", REVERT) == "running"
    argv = json.loads(docker("inspect", "-f", "{{json .Config.Cmd}}", REVERT))
    assert "UD-Q2_K_XL" in argv[argv.index("-m") + 1]
    record = json.loads((tmp_path / "state" / "last-good" / f"{REVERT}.json").read_text())
    assert record["base_dir"] == str(good_dir.resolve())
