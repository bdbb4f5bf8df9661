"""`kimik3 fleet plan` and `fleet status` on three hosts of the fleet rig (tests/support/fleet_hosts.py: a network
namespace each, its own sshd and dockerd, shared/TESTING.md §12): each host plans the demo profile with its own
address (its override) against its own daemon, the three in parallel over real SSH with the inventory's key and
known_hosts; then one host's sshd is stopped and the plan names it unreachable (exit 3) while the others plan.

Nothing is applied. Timings are printed (the run's own figures), not asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support.fleet_hosts import GATEWAY, _kill_pidfile, fleet_rig
from support.realparts import KIMIK3, demo_profile, require_docker_and_demo_hub, write_profile

from kimik3_demo.hub import FixtureHub
from kimik3_demo.prepare import demo_repos

pytestmark = pytest.mark.docker

NAME, PORT = "k3fleet-rig", 19352


def fleet(work: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "KIMIK3_STATE_DIR": str(work / "local-state")}
    start = time.monotonic()
    done = subprocess.run([*KIMIK3, "fleet", *args], capture_output=True, text=True, env=env, cwd=work, timeout=900)
    return done, time.monotonic() - start


def test_fleet_plan_and_status_on_three_namespace_hosts(tmp_path: Path) -> None:
    hub_root = require_docker_and_demo_hub()
    with fleet_rig(3, prefix="k3fp") as rig, FixtureHub(demo_repos(hub_root), host=GATEWAY) as hub:
        write_profile(tmp_path, demo_profile(tmp_path, NAME, PORT, hub.url), "profile.yaml")
        inventory = rig.inventory("serving")
        inventory["all"]["vars"] = {"kimik3_command": [str(Path(sys.executable).parent / "kimik3")]}
        document = {
            "apiVersion": "kimik3/v1",
            "kind": "Fleet",
            "name": "k3fleet-rig",
            "profile": "profile.yaml",
            "inventory": inventory,
            "overrides": {h.name: {"serve": {"host": h.address}} for h in rig.hosts},
            "rollout": {"hosts": "serving", "max_unavailable": 1},
            "router": {"version": "1.13.0"},
        }
        (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
        names = [h.name for h in rig.hosts]

        done, took = fleet(tmp_path, "plan", "--json", "--detailed-exitcode", "fleet.yaml")
        print(f"fleet plan, 3 hosts: {took:.1f} s")
        assert done.returncode == 4, done.stderr  # every host has changes; none failed
        planned = json.loads(done.stdout)
        assert [h["host"] for h in planned["hosts"]] == names and all(h["ok"] for h in planned["hosts"])
        for host, answer in zip(rig.hosts, planned["hosts"]):
            container = next(s for s in answer["plan"]["steps"] if s["kind"] == "container")
            assert host.address in json.dumps(container["spec"])  # its own override: its address
        rollout = planned["rollout"]
        assert [b["hosts"] for b in rollout["batches"]] == [[n] for n in names]
        assert min(step["serving"] for step in rollout["timeline"]) == 2
        assert [t["source"] for t in rollout["transfers"]] == [hub.url, f"peer {names[0]}", f"peer {names[0]}"]

        done, took = fleet(tmp_path, "status", "--json", "fleet.yaml")
        print(f"fleet status, 3 hosts: {took:.1f} s")
        assert done.returncode == 0, done.stderr
        rows = json.loads(done.stdout)["hosts"]
        assert [r["health"] for r in rows] == ["absent"] * 3

        _kill_pidfile(rig.hosts[1].root / "sshd" / "run.pid")  # the second host's sshd is gone
        done, _ = fleet(tmp_path, "plan", "fleet.yaml")
        assert done.returncode == 3
        assert f"host {names[1]} (root@{rig.hosts[1].address}): NOT PLANNED (unreachable)" in done.stdout
        assert f"error: {names[1]} (root@{rig.hosts[1].address}) is unreachable over SSH" in done.stderr
        assert f"host {names[0]} (root@{rig.hosts[0].address}): " in done.stdout
        assert "NOT PLANNED" not in next(
            line for line in done.stdout.splitlines() if line.startswith(f"host {names[2]}")
        )
