"""`systemd.enable: false` against a real systemd (PID 1 in a container, TESTING.md §6): apply installs and
starts an on-demand unit. systemd unloads a unit nothing references after daemon-reload, so
`systemctl reset-failed` answers "Unit … not loaded" there; that must not fail the install.

Its own box and names (k3-fault-*): the box of test_systemd_live.py belongs to that module.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.demo_work import truncated_hub
from support.realparts import demo_profile, docker, kimik3, write_profile
from support.systemd_box import host_docker, remove, start_box, with_docker_service

from kimik3_demo.hub import FixtureHub

pytestmark = pytest.mark.docker

BOX = "k3-fault-systemd"
NAME, PORT = "k3-fault-ondemand", 19253
UNIT = f"{NAME}.service"


def in_box(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", "exec", BOX, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def box() -> Iterator[Path]:
    """systemd as PID 1 with the host's docker socket and CLI; yields its root filesystem as seen from here."""
    try:
        root = start_box(BOX, *host_docker(), rm=(NAME,))
        with_docker_service(BOX, root, present=True)
        yield root
    finally:
        remove(NAME, BOX)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FixtureHub]:
    """The demo repo plus UD-TRUNC: a shard cut to a third (downloads and verifies, cannot load)."""
    with truncated_hub(tmp_path_factory.mktemp("fault-sd-hub")) as running:
        yield running


def test_enable_false_installs_and_starts_an_on_demand_unit(tmp_path: Path, box: Path, hub: FixtureHub) -> None:
    profile = demo_profile(tmp_path, NAME, PORT, hub.url)
    profile["systemd"] = {"unit": NAME, "enable": False}  # nothing else references the unit
    write_profile(tmp_path, profile)
    args = ("--systemd-root", str(box), "--systemctl-prefix", f"docker exec {BOX}")
    result = kimik3(tmp_path, *args, "apply", "profile.yaml", check=False)
    assert result.returncode == 0, result.stderr
    assert in_box("systemctl", "is-active", UNIT).stdout.strip() == "active"
    assert in_box("systemctl", "is-enabled", UNIT).stdout.strip() == "disabled"
    assert docker("inspect", "-f", "{{.State.Status}}", NAME) == "running"
    assert kimik3(tmp_path, *args, "plan", "--detailed-exitcode", "profile.yaml", check=False).returncode == 0

    # A failing update with no revert target: nothing starts the failing server again, neither dockerd
    # (restart policy `no` under systemd) nor the unit: the replace ended its `docker start --attach`,
    # at times with a failure (seen: the unit `activating`, auto-restart), so apply stops the unit too.
    (tmp_path / "state" / "last-good" / f"{NAME}.json").unlink()
    profile["model"]["quant"] = "UD-TRUNC"
    write_profile(tmp_path, profile, "broken.yaml")
    result = kimik3(tmp_path, *args, "apply", "broken.yaml", check=False)
    assert result.returncode == 1 and "the GGUF could not be read" in result.stderr, result.stderr
    started = docker("inspect", "-f", "{{.State.StartedAt}}", NAME)
    time.sleep(12)  # RestartSec=10
    assert in_box("systemctl", "is-active", UNIT).stdout.strip() in ("inactive", "failed")
    assert docker("inspect", "-f", "{{.State.Status}} {{.State.StartedAt}}", NAME) == f"exited {started}"
    kimik3(tmp_path, *args, "destroy", "profile.yaml")
    assert not (box / "etc/systemd/system" / UNIT).exists()
