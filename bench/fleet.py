"""Benchmark (issue 36): a quant change rolled across 3 hosts under load, kimik3 fleet apply against plain Ansible.

What clients see through the router while the change rolls, with `kimik3 fleet apply` against a plain Ansible
`serial: 1` rollout without drain; and `fleet plan`/`fleet status` of the 3 hosts against one host's plan and the
SSH round trip. All measured in the same run, on the fleet rig (tests/support/fleet_hosts.py: a network namespace
per host, its own sshd and dockerd; shared/TESTING.md §12).

    flock /tmp/k3-fleet-rig.lock .venv/bin/python bench/fleet.py [--runs 2] [--workers 4]

Set-up, as tests/integration/test_fleet_rollout_docker.py's (tests/support/fleet_rollout.py: its fleet file, names
and ports): the llama.cpp image built here (the demo's, cached by layer), pushed to the registry on the bridge and
pulled by digest on the first host; a first `kimik3 fleet apply --install --registry` installs kimik3 on the 3 hosts
and deploys the demo profile (UD-Q2_K_XL) behind smg. Then per run, with a closed-loop client (tests/support/closed_loop.py: `--workers`
threads, half streaming, every other request offering a tool) sending through smg:

1. `fleet plan` / `fleet status` of the 3 hosts, one host's `plan`/`status` over SSH and the SSH round trip
   (bench/fleet_plan.py's `measure`);
2. plain: a one-play playbook, `serial: 1`, that runs `kimik3 apply` on each host (the profile on stdin) and nothing
   else: no router steps, every host stays in smg's list while its server is replaced (what an operator without
   kimik3's drain gets), rolling to the other quant;
3. kimik3: `kimik3 fleet apply` of the same change back (out of the router, drained, applied, gated, back in).

Printed per run and rollout: requests, failed (no answer or not 200), truncated (a 200 whose body did not end as
llama-server ends one), p50/p99 latency of the requests that ran during the rollout, the fewest hosts in smg's
rotation (sampled each second), the hosts in rotation right after, and the rollout's seconds; then the spread over the runs and kimik3/plain ratios.
The first plain rollout fetches UD-Q4_K_XL from the hub on each host (later ones find it cached; kimik3's rolls back
to the quant every host holds): its seconds include that download.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

import router_hold  # noqa: E402
import yaml  # noqa: E402
from fleet_plan import measure, print_spread, ssh_to  # noqa: E402
from handover import quantile  # noqa: E402
from support import fleet_rollout as fleet_setup  # noqa: E402
from support.fleet_hosts import GATEWAY, Rig, RotationSampler, fleet_rig, stop_router  # noqa: E402
from support.realparts import require_docker_and_demo_hub  # noqa: E402

from kimik3_demo.hub import FixtureHub  # noqa: E402
from kimik3_demo.prepare import demo_repos  # noqa: E402
from kimik3_reconciler.adapters.ansible_play import run_playbook  # noqa: E402
from kimik3_reconciler.adapters.router_smg import SmgRouter  # noqa: E402
from kimik3_reconciler.cli.fleet_cmd import load_fleet  # noqa: E402

QUANTS = ("UD-Q2_K_XL", "UD-Q4_K_XL")  # the first apply deploys the first; each run rolls to the other and back


def plain_playbook() -> list[dict]:
    """One play, one host at a time, `kimik3 apply` there and nothing else (no router step, no gate after)."""
    return [
        {
            "name": "plain rollout: serial 1, no drain",
            "hosts": "serving",
            "gather_facts": False,
            "order": "inventory",
            "serial": 1,
            "any_errors_fatal": True,
            "tasks": [
                {
                    "name": "kimik3 apply",
                    "ansible.builtin.command": {
                        "argv": "{{ kimik3_command + ['apply', '/dev/stdin'] }}",
                        "stdin": "{{ lookup('ansible.builtin.file', kimik3_profile_file) }}",
                    },
                }
            ],
        }
    ]


def plain_rollout(work: Path, log) -> int:  # noqa: ANN001 - a text stream
    """The plain playbook over the fleet file's hosts (their connection vars, kimik3 and effective profile): its
    exit status."""
    run_dir = work / "plain"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir()
    hosts = {}
    for index, host in enumerate(load_fleet(str(work / "fleet.yaml")).hosts):
        (run_dir / f"host-{index}.yaml").write_text(host.profile_text)
        connection = {k: v for k, v in host.vars.items() if k.startswith("ansible_")}
        hosts[host.name] = {
            "ansible_host": host.address,
            **connection,
            "kimik3_command": list(host.kimik3_command),
            "kimik3_profile_file": str(run_dir / f"host-{index}.yaml"),
        }
    (run_dir / "inventory.json").write_text(json.dumps({"all": {"children": {"serving": {"hosts": hosts}}}}))
    (run_dir / "playbook.yaml").write_text(yaml.safe_dump(plain_playbook(), sort_keys=False))
    return run_playbook(run_dir, run_dir / "playbook.yaml", run_dir / "inventory.json", log)


def every_host_in_rotation(router: SmgRouter, rig: Rig) -> None:
    """Each run starts from the same router: every host listed (added when smg dropped it, released when a rollout
    left it held) and in rotation."""
    for host in rig.hosts:
        url = f"http://{host.address}:{fleet_setup.PORT}"
        listed = router.find(url)
        if listed is None:
            router.add(url)
        elif router_hold.held(router, url):
            router_hold.release(router, listed.id)
        router.wait_in_rotation(url, timeout_s=180)


def under_load(rollout, rig: Rig, workers: int) -> dict:  # noqa: ANN001 - () -> (exit status, output tail)
    """`rollout` run while the closed-loop client sends through smg; what the clients saw, and how many hosts smg
    had in rotation right after."""
    router = fleet_setup.fleet_router()
    every_host_in_rotation(router, rig)
    with (
        fleet_setup.router_load(workers) as load,
        RotationSampler(router) as sampler,
    ):
        load.wait_for(2 * workers)
        started = time.monotonic()
        code, tail = rollout()
        ended = time.monotonic()
        load.wait_for(load.done() + 2 * workers)
    after = sum(w.in_rotation for w in router.workers())
    router.close()
    if code != 0:
        raise SystemExit(f"the rollout exited {code}:\n{tail}")
    during = [o.seconds for o in load.between(started, ended)]
    failed = [o for o in load.outcomes if o.status != 200]
    truncated = [o for o in load.outcomes if o.status == 200 and not o.complete]
    return {
        "requests": len(load.outcomes),
        "failed": len(failed),
        "truncated": len(truncated),
        "p50": quantile(during, 0.5),
        "p99": quantile(during, 0.99),
        "min in rotation": min(sampler.samples),
        "seconds": ended - started,
        "in rotation after": after,
        "errors": sorted({o.error[:70] or str(o.status) for o in failed + truncated})[:3],
    }


def kimik3_rollout(work: Path) -> tuple[int, str]:
    done = fleet_setup.fleet_cmd(work, "apply", "fleet.yaml")
    return done.returncode, done.stderr[-3000:]


def plain(work: Path) -> tuple[int, str]:
    log = work / "plain.log"
    with log.open("w") as out:
        code = plain_rollout(work, out)
    return code, log.read_text()[-3000:]


def row(mode: str, seen: dict) -> str:
    return (
        f"{mode:7} {seen['requests']:8} {seen['failed']:7} {seen['truncated']:10} {seen['p50']:7.2f}s "
        f"{seen['p99']:7.2f}s {seen['min in rotation']:12} {seen['in rotation after']:6} {seen['seconds']:8.0f}s"
        + (f"   {'; '.join(seen['errors'])}" if seen["errors"] else "")
    )


HEADER = f"{'':7} {'requests':>8} {'failed':>7} {'truncated':>10} {'p50':>8} {'p99':>8} {'min in rot.':>12} {'after':>6} {'rollout':>9}"


def spread(values: list[float], unit: str = "") -> str:
    return f"{statistics.median(values):.2f}{unit} ({min(values):.2f}–{max(values):.2f})"


def print_rollouts(seen: dict[str, list[dict]]) -> None:
    runs = len(seen["plain"])
    print(f"\nrollouts of 3 hosts under load, {runs} run(s): median (min–max)")
    for what in ("failed", "truncated", "p99", "seconds", "min in rotation", "requests"):
        print(
            f"{what:16} plain {spread([s[what] for s in seen['plain']]):24} "
            f"kimik3 {spread([s[what] for s in seen['kimik3']])}"
        )
    for what in ("p99", "seconds"):
        each = [k[what] / p[what] for k, p in zip(seen["kimik3"], seen["plain"])]
        print(f"kimik3 / plain {what}: {spread(each, 'x')}")
    lost = [(p["failed"] + p["truncated"], k["failed"] + k["truncated"]) for p, k in zip(seen["plain"], seen["kimik3"])]
    print("requests lost (failed + truncated), plain → kimik3 per run: " + ", ".join(f"{p} → {k}" for p, k in lost))


@contextmanager
def deployed(rig: Rig, hub: FixtureHub, work: Path, **fleet):  # noqa: ANN201, ANN003 - Iterator[Path]; write_fleet's
    """The rollout test's set-up: the image on the first host, kimik3 installed by a first `fleet apply --install`,
    the demo profile served by the 3 hosts behind smg (`fleet`: write_fleet's serve, rollout, policy); smg stopped
    after."""
    fleet_setup.image_on_first_host(rig, work / "build")
    fleet_setup.write_fleet(work, rig, hub, QUANTS[0], **fleet)
    try:
        first = fleet_setup.install_and_deploy(work, rig)
        if first.returncode != 0:
            raise SystemExit(f"the first fleet apply exited {first.returncode}:\n{first.stderr[-3000:]}")
        print(first.stdout.strip(), flush=True)
        yield work
    finally:
        stop_router(work, fleet_setup.FLEET)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="pairs of rollouts (plain, then kimik3)")
    parser.add_argument("--workers", type=int, default=4, help="the closed-loop client's threads")
    args = parser.parse_args()
    hub_root = require_docker_and_demo_hub()
    work = Path(tempfile.mkdtemp(prefix="k3fleet-bench-"))
    (work / "build").mkdir()
    figures: dict[str, list[float]] = {}
    seen: dict[str, list[dict]] = {"plain": [], "kimik3": []}
    with (
        fleet_rig(3, prefix="k3fb") as rig,
        FixtureHub(demo_repos(hub_root), host=GATEWAY) as hub,
        deployed(rig, hub, work),
    ):
        fleet = load_fleet(str(work / "fleet.yaml")).hosts[0]
        env = {**os.environ, "KIMIK3_STATE_DIR": str(work / "controller-state")}
        for run in range(args.runs):
            measured = measure(
                ssh_to(rig, rig.hosts[0]), fleet.kimik3_command[0], fleet.profile_text, work / "fleet.yaml", env
            )
            for what, seconds in measured.items():
                figures.setdefault(what, []).append(seconds)
            print(f"run {run + 1}/{args.runs}: " + ", ".join(f"{k} {v:.2f} s" for k, v in measured.items()))
            fleet_setup.write_fleet(work, rig, hub, QUANTS[1])
            seen["plain"].append(under_load(lambda: plain(work), rig, args.workers))
            fleet_setup.write_fleet(work, rig, hub, QUANTS[0])
            seen["kimik3"].append(under_load(lambda: kimik3_rollout(work), rig, args.workers))
            print(HEADER)
            for mode in ("plain", "kimik3"):
                print(row(mode, seen[mode][-1]), flush=True)
    print_spread(figures, args.runs)
    print_rollouts(seen)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
