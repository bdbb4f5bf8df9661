"""`kimik3 fleet plan` and `fleet status` over real SSH (issue 36 items 2, 5): a real sshd on a loopback port (its
own keys: tests/support/sshd.py) runs this machine's kimik3 as the fleet's first host, which plans the demo profile
against this machine's Docker and the fixture hub; a second host whose SSH port is closed (unreachable) and a third
whose kimik3 is another version are named, and both commands exit 3. Last, the profile is applied on the first
host (this machine) from a folder of its own and its status row says what serves there: fingerprint, quant, image,
health, requests in flight (its server's /metrics); its plan is then converged; the deployment is destroyed after it,
so the tests that plan from nothing pass before or after it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.realparts import KIMIK3, demo_hub, demo_profile, docker, kimik3, remove_leftovers, write_profile
from support.sshd import Sshd, running_sshd

from kimik3_demo.hub import FixtureHub

pytestmark = [pytest.mark.docker]

SSH_PORT, CLOSED_PORT = 19340, 19341
NAME, PORT = "k3fleet-ssh", 19342


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    with running_sshd(tmp_path_factory.mktemp("k3fleet-sshd"), SSH_PORT) as server:
        yield server


@pytest.fixture(scope="module")
def hub() -> Iterator[FixtureHub]:
    with demo_hub() as running:
        yield running


def write_fleet(work: Path, hub: FixtureHub, sshd: Sshd) -> Path:
    """The demo profile and a fleet of three hosts (here, gone, old) in `work`, here's kimik3 keeping its state there."""
    write_profile(work, demo_profile(work, NAME, PORT, hub.url), "profile.yaml")
    old = work / "old-kimik3"  # a host whose kimik3 is another release (its --version says so)
    old.write_text("#!/bin/sh\necho 'kimik3 0.0.9 (code 0000000000000000)'\n")
    old.chmod(0o755)
    # The host's kimik3: this checkout's, with the test's state dir, HF home and host lock (sshd gives the
    # session a clean environment; the inventory says how kimik3 runs there, as an operator's would).
    remote = [
        "env",
        f"KIMIK3_STATE_DIR={work / 'state'}",
        f"HF_HOME={work / 'hf-home'}",
        f"KIMIK3_HOST_LOCK={os.environ['KIMIK3_HOST_LOCK']}",
        "HF_HUB_DISABLE_XET=1",
        str(Path(sys.executable).parent / "kimik3"),
    ]
    fleet = {
        "apiVersion": "kimik3/v1",
        "kind": "Fleet",
        "name": "k3fleet",
        "profile": "profile.yaml",
        "inventory": {
            "all": {
                "vars": {"ansible_host": "127.0.0.1", "ansible_user": sshd.user, "kimik3_command": remote},
                "hosts": {
                    "here": {"ansible_port": SSH_PORT},
                    "gone": {"ansible_port": CLOSED_PORT},
                    "old": {"ansible_port": SSH_PORT, "kimik3_command": [str(old)]},
                },
            }
        },
        "overrides": {"gone": {"serve": {"port": PORT + 1}}, "old": {"serve": {"port": PORT + 2}}},
        "rollout": {"max_unavailable": 1},
        "router": {"version": "1.13.0"},
    }
    (work / "fleet.yaml").write_text(yaml.safe_dump(fleet, sort_keys=False))
    return work


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory, hub: FixtureHub, sshd: Sshd) -> Iterator[Path]:
    """Nothing deployed: the plan and status tests see the host as it is before a first apply."""
    remove_leftovers(NAME)
    yield write_fleet(tmp_path_factory.mktemp("k3fleet"), hub, sshd)
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)


@pytest.fixture
def serving(tmp_path: Path, hub: FixtureHub, sshd: Sshd) -> Iterator[Path]:
    """The demo applied on the host from a folder of its own (its own state and model cache), destroyed after: the
    tests that plan from nothing find nothing deployed, whichever order they run in."""
    work = write_fleet(tmp_path, hub, sshd)
    try:
        kimik3(work, "apply", "profile.yaml")
        yield work
    finally:
        kimik3(work, "destroy", "profile.yaml", check=False)
        subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)


def fleet(work: Path, sshd: Sshd, *args: str) -> subprocess.CompletedProcess[str]:
    env = sshd.env({**os.environ, "KIMIK3_STATE_DIR": str(work / "local-state")})  # the test's ssh first on PATH
    return subprocess.run([*KIMIK3, "fleet", *args], capture_output=True, text=True, env=env, cwd=work, timeout=900)


def test_fleet_plan_plans_on_the_host_and_names_the_hosts_it_cannot(work: Path, sshd: Sshd) -> None:
    done = fleet(work, sshd, "plan", "--json", "fleet.yaml")
    assert done.returncode == 3, done.stderr
    document = json.loads(done.stdout)
    here, gone, old = document["hosts"]
    assert here["ok"] and here["plan"]["profile"] == NAME and not here["converged"], here
    kinds = {s["kind"] for s in here["plan"]["steps"]}
    assert {"model", "image", "container", "health"} <= kinds
    # the host planned the effective profile it was sent: its own port, its absolute cache folder
    container = next(s for s in here["plan"]["steps"] if s["kind"] == "container")
    assert str(PORT) in json.dumps(container["spec"])
    assert here["fetch_bytes"] > 0 and here["relaunch"] and here["downtime_s"] is not None
    assert gone["problem"] == "unreachable" and "gone (" in gone["message"]
    assert old["problem"] == "version" and "0.0.9" in old["message"]
    rollout = document["rollout"]
    assert [b["hosts"] for b in rollout["batches"]] == [["here"]]
    assert rollout["transfers"][0]["host"] == "here" and rollout["transfers"][0]["source"].startswith("http://")
    assert "error: gone (" in done.stderr and "unreachable over SSH" in done.stderr
    assert "error: old runs kimik3 0.0.9" in done.stderr


def test_fleet_plan_text_and_detailed_exitcode(work: Path, sshd: Sshd) -> None:
    done = fleet(work, sshd, "plan", "fleet.yaml")
    assert done.returncode == 3
    assert f"host here ({sshd.user}@127.0.0.1):" in done.stdout
    assert "host gone" in done.stdout and "NOT PLANNED (unreachable)" in done.stdout
    assert "canary: here at +0 s:" in done.stdout and "duration:" in done.stdout and "capacity:" in done.stdout


def test_fleet_status_one_row_per_host(work: Path, sshd: Sshd) -> None:
    done = fleet(work, sshd, "status", "--json", "fleet.yaml")
    assert done.returncode == 3, done.stderr
    rows = {r["host"]: r for r in json.loads(done.stdout)["hosts"]}
    assert rows["here"]["ok"] and rows["here"]["health"] == "absent" and rows["here"]["drift"] == "no container"
    assert rows["here"]["kimik3"] and rows["here"]["kimik3"].startswith(("0.", "unreleased"))
    assert rows["gone"]["problem"] == "unreachable" and rows["old"]["problem"] == "version"
    text = fleet(work, sshd, "status", "fleet.yaml")
    assert text.returncode == 3
    header = text.stdout.splitlines()[0].split()
    assert header == [
        "host",
        "fingerprint",
        "quant",
        "build",
        "kimik3",
        "health",
        "in_flight",
        "cache_hits",
        "router",
        "drift",
    ]
    assert any(line.startswith("gone: gone (") for line in text.stdout.splitlines())
    assert "error: gone (" in text.stderr and "error: old runs kimik3 0.0.9" in text.stderr
    watched = fleet(work, sshd, "status", "--watch", "--interval", "0.5s", "--iterations", "2", "fleet.yaml")
    assert watched.returncode == 3 and watched.stdout.count("host  ") == 2  # the table, drawn twice


def test_fleet_status_of_a_serving_host(serving: Path, sshd: Sshd) -> None:
    """The host serving (applied here: the sshd's host is this machine, its kimik3 the same state dir and daemon):
    its row says what runs there, and its server's requests in flight, read from its /metrics."""
    done = fleet(serving, sshd, "status", "--json", "fleet.yaml")
    assert done.returncode == 3, done.stderr  # gone and old still fail
    here = json.loads(done.stdout)["hosts"][0]
    labels = json.loads(docker("inspect", NAME))[0]["Config"]["Labels"]
    assert here["health"] == "ok" and here["drift"] == "none seen" and here["in_flight"] == 0
    # its server's own prefix-cache counters (llama-server's cached and evaluated prompt tokens), and the fleet's
    cache = here["prefix_cache"]
    assert cache is not None and 0 <= cache["hit_tokens"] <= cache["prompt_tokens"]
    assert json.loads(done.stdout)["prefix_cache"] == cache  # the only host with a server
    assert here["fingerprint"] == labels["kimik3.container.fingerprint"][:12]
    assert here["quant"] == "UD-Q2_K_XL" and here["build"] == json.loads(docker("inspect", NAME))[0]["Config"]["Image"]
    planned = json.loads(fleet(serving, sshd, "plan", "--json", "fleet.yaml").stdout)
    assert planned["hosts"][0]["converged"] and planned["rollout"]["batches"] == []
