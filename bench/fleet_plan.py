"""Benchmark: `kimik3 fleet plan` and `fleet status` on 3 hosts against one host's own plan/status and the SSH round
trip, all measured in the same run on the fleet rig (tests/support/fleet_hosts.py: a network namespace per host,
its own sshd and dockerd; shared/TESTING.md §12).

    .venv/bin/python bench/fleet_plan.py [--runs 5]      # root (namespaces), openssh-server, docker-registry

Per run, in this order: `ssh host true` (the SSH round trip), `ssh host kimik3 --version` (kimik3's start over
SSH), one host's `kimik3 plan --json` and `kimik3 status --json` over SSH (the profile on stdin, as the fleet sends
it), then `kimik3 fleet plan` and `kimik3 fleet status` of the 3 hosts. Printed: median and min-max over the runs,
and the fleet's time as a ratio of one host's. The 3 "hosts" share this machine's cores, so three plans at once
compete for them: the ratio is an upper bound of what separate machines would show (there: ~1 + the fan-out).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import yaml  # noqa: E402
from support.fleet_hosts import GATEWAY, fleet_rig  # noqa: E402
from support.realparts import KIMIK3, demo_profile, require_docker_and_demo_hub, write_profile  # noqa: E402

from kimik3_demo.hub import FixtureHub  # noqa: E402
from kimik3_demo.prepare import demo_repos  # noqa: E402

NAME, PORT = "k3fleet-bench", 19362
KIMIK3_THERE = str(Path(sys.executable).parent / "kimik3")


def timed(argv: list[str], stdin: str | None = None, env: dict | None = None, ok: tuple[int, ...] = (0,)) -> float:
    start = time.monotonic()
    done = subprocess.run(argv, input=stdin or "", capture_output=True, text=True, env=env, timeout=900)
    took = time.monotonic() - start
    if done.returncode not in ok:
        raise SystemExit(f"{argv[:3]}... exited {done.returncode}: {done.stderr[-2000:]} {done.stdout[-3000:]}")
    return took


def ssh_to(rig, host) -> list[str]:  # noqa: ANN001 - support.fleet_hosts.Rig, RigHost
    """`ssh root@host` with the rig's key, as the fleet reaches a host (the command's words follow)."""
    return [
        "ssh",
        "-i",
        str(rig.ssh_key),
        "-o",
        f"UserKnownHostsFile={rig.known_hosts}",
        "-o",
        "BatchMode=yes",
        "-o",
        "IdentitiesOnly=yes",
        f"root@{host.address}",
    ]


def measure(ssh: list[str], kimik3_there: str, profile_text: str, fleet_file: Path, env: dict) -> dict[str, float]:
    """One run's figures: the SSH round trip, kimik3's start over SSH, one host's plan and status over SSH (the
    profile on stdin, as the fleet sends it), then `fleet plan` and `fleet status` of every host of `fleet_file`."""
    return {
        "ssh round trip": timed([*ssh, "true"]),
        "ssh kimik3 --version": timed([*ssh, kimik3_there, "--version"]),
        "one host: plan over ssh": timed([*ssh, kimik3_there, "plan", "--json", "/dev/stdin"], profile_text),
        "one host: status over ssh": timed([*ssh, kimik3_there, "status", "--json", "/dev/stdin"], profile_text),
        "fleet plan (3 hosts)": timed([*KIMIK3, "fleet", "plan", "--json", str(fleet_file)], env=env),
        "fleet status (3 hosts)": timed([*KIMIK3, "fleet", "status", "--json", str(fleet_file)], env=env),
    }


def print_spread(figures: dict[str, list[float]], runs: int) -> None:
    """Median and min-max of each figure over the runs, then the fleet's time as a ratio of one host's."""
    print(f"\n{'':28} {'median':>8} {'min':>7} {'max':>7}   ({runs} runs)")
    for what, values in figures.items():
        print(f"{what:28} {statistics.median(values):7.2f}s {min(values):6.2f}s {max(values):6.2f}s")
    ratios = {
        "fleet plan / one host's plan": ("fleet plan (3 hosts)", "one host: plan over ssh"),
        "fleet status / one host's status": ("fleet status (3 hosts)", "one host: status over ssh"),
        "one host's plan / ssh round trip": ("one host: plan over ssh", "ssh round trip"),
    }
    for what, (num, den) in ratios.items():
        each = [a / b for a, b in zip(figures[num], figures[den])]
        print(f"{what:34} median {statistics.median(each):.2f}x (min {min(each):.2f}x, max {max(each):.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    hub_root = require_docker_and_demo_hub()
    work = Path(tempfile.mkdtemp(prefix="k3fleet-bench-"))
    figures: dict[str, list[float]] = {}
    with fleet_rig(3, prefix="k3fb") as rig, FixtureHub(demo_repos(hub_root), host=GATEWAY) as hub:
        write_profile(work, demo_profile(work, NAME, PORT, hub.url), "profile.yaml")
        inventory = rig.inventory("serving")
        inventory["all"]["vars"] = {"kimik3_command": [KIMIK3_THERE]}
        (work / "fleet.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kimik3/v1",
                    "kind": "Fleet",
                    "name": "k3fleet-bench",
                    "profile": "profile.yaml",
                    "inventory": inventory,
                    "overrides": {h.name: {"serve": {"host": h.address}} for h in rig.hosts},
                    "rollout": {"hosts": "serving"},
                    "router": {"version": "1.13.0"},
                },
                sort_keys=False,
            )
        )
        effective = json.loads(
            subprocess.run(
                [*KIMIK3, "fleet", "validate", "--json", str(work / "fleet.yaml")], capture_output=True, text=True
            ).stdout
        )
        assert effective["ok"], effective
        from kimik3_reconciler.cli.fleet_cmd import load_fleet

        profile_text = load_fleet(str(work / "fleet.yaml")).hosts[0].profile_text
        ssh = ssh_to(rig, rig.hosts[0])
        env = {**os.environ, "KIMIK3_STATE_DIR": str(work / "local-state")}
        for run in range(runs):
            measured = measure(ssh, KIMIK3_THERE, profile_text, work / "fleet.yaml", env)
            for what, seconds in measured.items():
                figures.setdefault(what, []).append(seconds)
            print(f"run {run + 1}/{runs}: " + ", ".join(f"{k} {v:.2f} s" for k, v in measured.items()), flush=True)
    print_spread(figures, runs)


if __name__ == "__main__":
    main()
