"""systemd units against a real systemd: PID 1 in a container (TESTING.md §6), driving the host's dockerd
through the mounted socket and docker CLI, while the real `kimik3` runs here with `--systemd-root` (the
container's rootfs) and `--systemctl-prefix "docker exec <box>"`.

kimik3 installs, enables, starts, observes and removes a unit; a hand-edited unit is drift; the
Conflicts= pair switches under systemd alone; the EnvironmentFile trap ('#' in a value) is checked
in the environment systemd really gave the service.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import systemd_box
from support.realparts import (
    DEMO_DIR,
    REPO_ROOT,
    demo_profile,
    docker,
    kimik3,
    require_docker_and_demo_hub,
    serves,
    wait_for,
    write_profile,
)
from support.systemd_box import host_docker, remove, start_box

from kimik3_demo.hub import FixtureHub, FixtureRepo
from kimik3_demo.prepare import DEMO_REPO, DEMO_REVISION, demo_repos

pytestmark = pytest.mark.docker

BOX = "kimik3-systemd-itest"
MAIN, OTHER = "kimi-k3-sdtest", "kimi-k3-sdtest-b"  # not kimi-k3-itest/-vtest/-demo (18282/18383/18181)
PORT = 18585  # shared by both: the second profile's unit gets `Conflicts=` derived from it
UNIT, OTHER_UNIT = f"{MAIN}.service", f"{OTHER}.service"
METRICS_PROFILE, METRICS_PORT = "k3m2-sd", 19290  # metrics under systemd: serve 19290, exporter 19291
METRICS_WORK = DEMO_DIR / "systemd-metrics-itest"  # its state dir, mounted at the same path in the box
FRONT_PROFILE, FRONT_PORT = "k3fr-sd", 19390  # metrics.handover under systemd: front 19390, server +1, exporter +2
CACHE_NAME = "hf cache #1"  # a value with '#' and a space in the env file: it must survive as written


def in_box(*args: str, check: bool = True) -> str:
    return systemd_box.in_box(BOX, *args, check=check, timeout=300)


def state(container: str) -> str:
    return docker("inspect", "-f", "{{.State.Status}}", container)


@pytest.fixture(scope="module")
def box() -> Iterator[Path]:
    """A systemd-as-PID-1 container; yields its root filesystem as this machine sees it (overlay2 merged dir)."""
    # The exporter's unit runs this kimik3 (its interpreter, venv and checkout) with its state dir: the same
    # paths in the box, read-only but the exporter test's work dir. Never /tmp: the box's systemd-tmpfiles
    # empties /tmp at boot.
    same_paths = [f"{p}:{p}:ro" for p in sorted({sys.base_prefix, sys.prefix, str(REPO_ROOT)})]
    shutil.rmtree(METRICS_WORK, ignore_errors=True)
    METRICS_WORK.mkdir(parents=True)
    mounts = host_docker(*(arg for p in same_paths for arg in ("-v", p)), "-v", f"{METRICS_WORK}:{METRICS_WORK}")
    try:
        yield start_box(BOX, *mounts, rm=(MAIN, OTHER, METRICS_PROFILE))
    finally:
        remove(MAIN, OTHER, METRICS_PROFILE, BOX)
        shutil.rmtree(METRICS_WORK, ignore_errors=True)


@pytest.fixture(scope="module")
def hub() -> Iterator[FixtureHub]:
    repos = demo_repos(require_docker_and_demo_hub())
    with FixtureHub([FixtureRepo(DEMO_REPO, DEMO_REVISION, repos[0].files)]) as running:
        yield running


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory, hub: FixtureHub, box: Path) -> Path:
    work = tmp_path_factory.mktemp("kimik3-systemd")
    main = demo_profile(work, MAIN, PORT, hub.url)
    main["model"]["cache_dir"] = str(work / CACHE_NAME)
    main["systemd"] = {"unit": MAIN, "enable": True, "conflicts": [OTHER]}
    write_profile(work, main, "main.yaml")
    other = demo_profile(work, OTHER, PORT, hub.url)
    other["model"]["cache_dir"] = str(work / CACHE_NAME)
    other["systemd"] = {"unit": OTHER, "enable": False}  # no explicit conflicts: the shared port derives one
    write_profile(work, other, "other.yaml")
    return work


def sd_kimik3(work: Path, box: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return kimik3(work, "--systemd-root", str(box), "--systemctl-prefix", f"docker exec {BOX}", *args, check=check)


def apply_helper_unit(work: Path, box: Path, file: str, kind: str, unit: str, command: str) -> None:
    """apply installs and starts a helper's unit (the exporter's, the front's) running `command` with the observed
    interpreter, restarted on failure."""
    applied = json.loads(sd_kimik3(work, box, "apply", "--json", file).stdout)
    assert (kind, "create") in [(s["kind"], s["action"]) for s in applied["executed"]]
    assert in_box("systemctl", "is-active", unit) == "active"
    lines = (box / "etc/systemd/system" / unit).read_text().splitlines()
    assert f"ExecStart={sys.executable} -m kimik3_reconciler {command} ${{KIMIK3_PROFILE}}" in lines
    assert "Restart=on-failure" in lines


def crash_and_wait_restart(unit: str) -> None:
    """A crash of a helper's unit (SIGKILL): systemd starts it again (Restart=on-failure, RestartSec=5)."""
    in_box("systemctl", "kill", "--signal=SIGKILL", unit)
    wait_for(
        f"{unit} to restart",
        lambda: (
            in_box("systemctl", "show", "-p", "NRestarts", "--value", unit) == "1"
            and in_box("systemctl", "is-active", unit, check=False) == "active"
        ),
    )


def plan_json(work: Path, box: Path, profile: str) -> dict:
    return json.loads(sd_kimik3(work, box, "plan", "--json", profile).stdout)


def with_docker_service(box: Path, present: bool) -> None:
    systemd_box.with_docker_service(BOX, box, present)


@pytest.fixture
def docker_service(box: Path) -> Path:
    with_docker_service(box, present=True)
    return box


@pytest.fixture
def installed(work: Path, docker_service: Path) -> Path:
    """main.yaml applied (a no-op when it already is): its unit installed and active, whatever ran before (the tests
    run in a random order), or alone."""
    sd_kimik3(work, docker_service, "apply", "main.yaml")
    return work


def test_a_systemd_without_docker_service_is_refused(work: Path, box: Path) -> None:
    with_docker_service(box, present=False)
    try:
        result = sd_kimik3(work, box, "plan", "main.yaml", check=False)
    finally:
        with_docker_service(box, present=True)
    assert result.returncode == 3 and "no docker.service" in result.stderr and "Traceback" not in result.stderr


def test_apply_installs_enables_and_starts_the_unit(work: Path, docker_service: Path) -> None:
    box = docker_service
    sd_kimik3(work, box, "destroy", "main.yaml")  # not installed, whatever ran before
    applied = json.loads(sd_kimik3(work, box, "apply", "--json", "main.yaml").stdout)
    assert [(s["kind"], s["action"]) for s in applied["executed"]][-2:] == [("health", "read"), ("unit", "create")]
    assert in_box("systemctl", "is-active", UNIT) == "active"
    assert in_box("systemctl", "is-enabled", UNIT) == "enabled"
    unit_text = (box / "etc/systemd/system" / UNIT).read_text()
    assert unit_text.startswith("# kimik3: fingerprint=") and f"profile={MAIN}" in unit_text.splitlines()[0]
    assert f"Conflicts={OTHER_UNIT}" in unit_text.splitlines()
    # systemd is the one supervisor: dockerd has no restart policy on the container.
    assert docker("inspect", "-f", "{{.HostConfig.RestartPolicy.Name}}", MAIN) == "no"
    assert (box / "etc/kimik3" / f"{MAIN}.env").is_file()
    plan = plan_json(work, box, "main.yaml")
    assert plan["converged"] and plan["steps"][-1]["kind"] == "unit" and plan["steps"][-1]["action"] == "noop"
    status = sd_kimik3(work, box, "status", "main.yaml").stdout
    assert f"unit       {UNIT}: active, enabled" in status


def test_the_env_file_value_with_a_hash_survives_as_written(installed: Path, box: Path) -> None:
    work = installed
    env_file = (box / "etc/kimik3" / f"{MAIN}.env").read_text()
    assert f'KIMIK3_MODEL_CACHE="{work / CACHE_NAME}"' in env_file.splitlines()
    pid = in_box("systemctl", "show", "-p", "MainPID", "--value", UNIT)
    environ = dict(line.split("=", 1) for line in in_box("cat", f"/proc/{pid}/environ").split("\0") if "=" in line)
    assert environ["KIMIK3_MODEL_CACHE"] == str(work / CACHE_NAME)  # what systemd gave the service
    assert environ["KIMIK3_CONTAINER"] == MAIN


def test_systemd_restarts_the_same_container_without_rebuilding(installed: Path) -> None:
    restarts = int(in_box("systemctl", "show", "-p", "NRestarts", "--value", UNIT))
    container_id = docker("inspect", "-f", "{{.Id}}", MAIN)
    started = docker("inspect", "-f", "{{.State.StartedAt}}", MAIN)
    docker("kill", "-s", "KILL", MAIN)  # a crash: exit 137, the unit's Restart=on-failure (RestartSec=10)
    wait_for(
        "the unit to restart the container",
        lambda: docker("inspect", "-f", "{{.State.StartedAt}}", MAIN) != started and state(MAIN) == "running",
        timeout=60,
    )
    assert docker("inspect", "-f", "{{.Id}}", MAIN) == container_id  # same container: no download, no build
    assert in_box("systemctl", "show", "-p", "NRestarts", "--value", UNIT) == str(restarts + 1)
    wait_for("/health 200 after the restart", lambda: serves(PORT))
    in_box("systemctl", "restart", UNIT)  # ExecStop (docker stop -t 120) then docker start --attach
    wait_for("/health 200 after systemctl restart", lambda: serves(PORT))
    assert (
        docker("inspect", "-f", "{{.Id}}", MAIN) == container_id and in_box("systemctl", "is-active", UNIT) == "active"
    )


def test_a_hand_edited_unit_is_drift_that_apply_restores(installed: Path, box: Path) -> None:
    work = installed
    path = box / "etc/systemd/system" / UNIT
    rendered = path.read_text()
    path.write_text(rendered.replace("TimeoutStopSec=150", "TimeoutStopSec=5"))
    in_box("systemctl", "daemon-reload")
    plan = plan_json(work, box, "main.yaml")
    unit = plan["steps"][-1]
    assert (unit["kind"], unit["action"]) == ("unit", "update") and "edited by hand" in unit["reason"]
    assert unit["diff"] == [{"field": "unit Service.TimeoutStopSec", "old": "5", "new": "150"}]
    assert [s["kind"] for s in plan["steps"] if s["action"] != "noop"] == ["unit"]
    assert sd_kimik3(work, box, "plan", "--detailed-exitcode", "main.yaml", check=False).returncode == 4
    container = docker("inspect", "-f", "{{.Id}} {{.State.StartedAt}}", MAIN)
    sd_kimik3(work, box, "apply", "main.yaml")
    assert path.read_text() == rendered
    assert in_box("systemctl", "show", "-p", "TimeoutStopUSec", "--value", UNIT) == "2min 30s"  # reloaded
    assert docker("inspect", "-f", "{{.Id}} {{.State.StartedAt}}", MAIN) == container  # the service kept running


def test_the_conflicting_pair_switches(installed: Path, box: Path) -> None:
    work = installed
    plan = plan_json(work, box, "other.yaml")
    conflict = [s for s in plan["steps"] if s["kind"] == "conflict"]
    assert [(s["target"], s["action"]) for s in conflict] == [(MAIN, "update")]
    assert f"stop unit {UNIT}" in conflict[0]["reason"]
    sd_kimik3(work, box, "apply", "other.yaml")
    assert in_box("systemctl", "is-active", UNIT, check=False) == "inactive" and state(MAIN) == "exited"
    assert in_box("systemctl", "is-active", OTHER_UNIT) == "active" and state(OTHER) == "running"
    assert in_box("systemctl", "is-enabled", OTHER_UNIT, check=False) == "disabled"  # on-demand
    other_unit = (box / "etc/systemd/system" / OTHER_UNIT).read_text().splitlines()
    assert f"Conflicts={UNIT}" in other_unit  # derived: the two share port 18585
    # The operator switches with systemd alone: starting one stops the other.
    in_box("systemctl", "start", UNIT)
    wait_for("the main unit's server", lambda: serves(PORT))
    assert state(MAIN) == "running" and state(OTHER) == "exited"
    assert in_box("systemctl", "is-active", OTHER_UNIT, check=False) == "inactive"
    assert plan_json(work, box, "main.yaml")["converged"]


def test_destroy_removes_the_units_it_installed_and_nothing_else(installed: Path, box: Path) -> None:
    work = installed
    sd_kimik3(work, box, "apply", "other.yaml")  # both units installed (other's start stops main's: they conflict)
    foreign = box / "etc/systemd/system" / "operator-own.service"
    foreign.write_text("[Unit]\nDescription=installed by someone else\n[Service]\nExecStart=/bin/true\n")
    for profile, name in (("other.yaml", OTHER), ("main.yaml", MAIN)):
        sd_kimik3(work, box, "destroy", profile)
        assert not (box / "etc/systemd/system" / f"{name}.service").exists()
        assert not (box / "etc/kimik3" / f"{name}.env").exists()
        assert subprocess.run(["docker", "inspect", name], capture_output=True).returncode != 0
        assert in_box("systemctl", "is-enabled", f"{name}.service", check=False) in ("", "not-found")
    assert foreign.is_file()
    assert not list((box / "etc/systemd/system/multi-user.target.wants").glob("kimi-k3-sdtest*"))


def test_without_systemd_as_pid1_the_plan_refuses(work: Path, tmp_path: Path) -> None:
    # This machine: systemd is not PID 1. A profile with `systemd:` is refused with the reason, exit 3.
    result = kimik3(work, "--systemd-root", str(tmp_path), "plan", "main.yaml", check=False)
    assert result.returncode == 3 and "Traceback" not in result.stderr
    assert "systemd is not PID 1 on this host" in result.stderr


def test_the_exporter_is_a_unit_next_to_the_server(box: Path, hub: FixtureHub) -> None:
    """`metrics:` under `systemd:`: <unit>-metrics.service runs `metrics-serve` (the observed interpreter),
    serves /metrics, comes back after a crash (Restart=on-failure), and destroy removes both units."""
    with_docker_service(box, present=True)
    work = METRICS_WORK
    profile = demo_profile(work, METRICS_PROFILE, METRICS_PORT, hub.url)
    profile["systemd"] = {"unit": METRICS_PROFILE}
    profile["metrics"] = {"port": METRICS_PORT + 1}
    write_profile(work, profile, "metrics.yaml")
    unit = f"{METRICS_PROFILE}-metrics.service"
    try:
        apply_helper_unit(work, box, "metrics.yaml", "metrics", unit, "metrics-serve")
        with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT + 1}/metrics", timeout=5) as response:
            assert "kimik3_deployment_converged" in response.read().decode()
        plan = plan_json(work, box, "metrics.yaml")
        assert plan["converged"], [s for s in plan["steps"] if s["action"] != "noop"]
        crash_and_wait_restart(unit)
    finally:
        sd_kimik3(work, box, "destroy", "metrics.yaml", check=False)
    assert not (box / "etc/systemd/system" / unit).exists()
    assert not (box / "etc/systemd/system" / f"{METRICS_PROFILE}.service").exists()


def test_the_front_is_a_unit_next_to_the_server(box: Path, hub: FixtureHub) -> None:
    """Issue 38 item 12: `metrics.handover` under `systemd:`: <unit>-front.service runs `front-serve` (the observed
    interpreter) on serve.port in front of the server, comes back after a crash (Restart=on-failure), and destroy
    removes the units and the front's token."""
    with_docker_service(box, present=True)  # run alone (-k): the stand-in first
    work = METRICS_WORK  # mounted in the box at the same path (the fixture's state dir)
    profile = demo_profile(work, FRONT_PROFILE, FRONT_PORT, hub.url)
    profile["systemd"] = {"unit": FRONT_PROFILE}
    profile["metrics"] = {"port": FRONT_PORT + 2, "proxy": True, "server_port": FRONT_PORT + 1, "handover": {}}
    write_profile(work, profile, "front.yaml")
    unit = f"{FRONT_PROFILE}-front.service"
    try:
        apply_helper_unit(work, box, "front.yaml", "front", unit, "front-serve")
        assert serves(FRONT_PORT)  # a chat answered through the front, the server behind it on FRONT_PORT + 1
        plan = plan_json(work, box, "front.yaml")
        assert plan["converged"], [s for s in plan["steps"] if s["action"] != "noop"]
        crash_and_wait_restart(unit)
        wait_for("the restarted front to serve", lambda: serves(FRONT_PORT))
    finally:
        sd_kimik3(work, box, "destroy", "front.yaml", check=False)
    assert not (box / "etc/systemd/system" / unit).exists()
    assert not (work / "state" / "front" / FRONT_PROFILE / "token.json").exists()
