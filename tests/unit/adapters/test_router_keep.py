"""adapters/router_keep.py's decisions: which supervisor keeps the fleet's router (systemd only as root with systemd
as PID 1), the transient unit's command line (an argv list, restarted whatever its exit), its name from the fleet's,
and the keeper's pause between restarts. The restarts themselves run on real processes in
tests/integration/test_fleet_router_keep.py (keeper) and test_fleet_router_systemd.py (systemd units)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kimik3_reconciler.adapters import router_keep
from kimik3_reconciler.adapters.router_keep import (
    BACKOFF_MAX_S,
    KEEPER,
    RESTART_S,
    STEADY_S,
    SYSTEMD,
    pause_after,
    supervisor,
    systemd_run_argv,
    unit_name,
)
from kimik3_reconciler.adapters.router_smg import RouterError


def test_the_unit_runs_the_argv_as_given_restarted_whatever_its_exit() -> None:
    argv = ["/venv/bin/smg", "launch", "--host", "127.0.0.1"]
    run = systemd_run_argv("kimik3-smg-f.service", argv, Path("/state/fleet/f/router.log"))
    assert run[-len(argv) :] == argv and run[-len(argv) - 1] == "--"  # after `--`: never read as systemd-run's own
    assert run[:3] == ["systemd-run", "--unit", "kimik3-smg-f.service"] and "--collect" in run
    properties = {run[i + 1] for i, word in enumerate(run) if word == "-p"}
    assert {"Restart=always", f"RestartSec={RESTART_S:g}"} <= properties
    assert "StandardOutput=append:/state/fleet/f/router.log" in properties


def test_a_unit_name_holds_only_what_systemd_accepts() -> None:
    assert unit_name("router", "prod_k3.a") == "kimik3-router-prod_k3.a.service"
    assert unit_name("smg", "a b/c") == "kimik3-smg-a\\x20b\\x2fc.service"


def test_the_keeper_backs_off_a_process_that_keeps_exiting_at_once() -> None:
    pauses, pause = [], 0.0
    for _ in range(8):
        pause = pause_after(0.1, pause)
        pauses.append(pause)
    assert pauses[0] == RESTART_S and pauses == sorted(pauses) and pauses[-1] == BACKOFF_MAX_S
    assert pause_after(STEADY_S, BACKOFF_MAX_S) == RESTART_S  # one that ran a while: started again at once


@pytest.mark.parametrize(
    ("systemd_dir", "euid", "expected"), [(True, 0, SYSTEMD), (True, 1000, KEEPER), (False, 0, KEEPER)]
)
def test_systemd_keeps_it_only_as_root_where_systemd_is_pid_1(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, systemd_dir: bool, euid: int, expected: str
) -> None:
    """A user's own units (`systemd-run --user`) end with the user's session unless lingering is on: a non-root
    `fleet apply` gets the keeper, which says so on the plan's router line."""
    run = tmp_path / "run-systemd-system"
    if systemd_dir:
        run.mkdir()
    real_path = router_keep.Path
    monkeypatch.setattr(router_keep, "Path", lambda p: run if p == "/run/systemd/system" else real_path(p))
    monkeypatch.setattr(router_keep.os, "geteuid", lambda: euid)
    monkeypatch.setattr(router_keep.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert supervisor() == expected


def test_a_unit_systemctl_refuses_to_stop_is_an_error_not_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    """`fleet apply` as a user, the units a root `fleet apply` started: the stop was ignored, the record then named
    the keeper and the units ran on, recorded nowhere."""
    said = {"stop": (1, "Failed to stop kimik3-smg-f.service: Access denied"), "reset-failed": (0, "")}

    def systemctl(*args: str) -> subprocess.CompletedProcess[str]:
        code, err = said[args[0]]
        return subprocess.CompletedProcess(["systemctl", *args], code, "", err)

    monkeypatch.setattr(router_keep, "_systemctl", systemctl)
    with pytest.raises(RouterError, match="Access denied"):
        router_keep.stop_unit("kimik3-smg-f.service")
    said["stop"] = (5, "Failed to stop kimik3-smg-f.service: Unit kimik3-smg-f.service not loaded.")
    router_keep.stop_unit("kimik3-smg-f.service")  # none loaded: nothing to stop
