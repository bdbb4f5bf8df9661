"""`kimik3 fleet apply` on a Slurm fleet (issue 41 item 1; shared/TESTING.md §12): Debian's slurm-wlm with munge, a
controller on the fleet rig's bridge and one slurmd per rig host (its own network namespace and Docker daemon), GPUs
as gres on mknod'd devices (tests/support/slurm_cluster.py). Each replica is a job pinned to its node running
`kimik3 fleet job-step`: the same `kimik3 apply` as on a bare host, then the server held for the job's life.

1. A first `fleet apply` submits the three replicas' jobs (the demo profile, quant UD-Q2_K_XL): each runs on its
   node with the gres it asked for, serves on its host's address, and is in the router; `fleet status` reads the
   jobs from squeue.
2. Under a closed-loop client through smg, `fleet apply` rolls the second quant (UD-Q4_K_XL) node by node: every
   job replaced, 0 failed requests, never fewer than 2 replicas in the router's rotation.
3. `scancel` of a replica's job stops its server (the job holds it), and the next `fleet apply` submits it again.
4. A second fleet on the same cluster: a main server on h1 with RPC workers on h3 and h4 (one heterogeneous job:
   main + 2 worker components) and a plain replica on h2. The workers' step is cancelled: the job ends (its main
   server stopped), and the next `fleet apply` submits the group again, serving through the router.

Run it alone, under the rig's lock (one rig per machine: the bridge's name is fixed), with slurm-wlm, munge and the
`fleet` extra installed: `KIMIK3_FLEET_SLURM_TEST=1 flock /tmp/k3-fleet-rig.lock .venv/bin/pytest
tests/integration/test_fleet_slurm.py -x -q -s -p no:randomly` (-s prints the rollout's figures). The tests share one
rig, image, cluster and first apply (module fixtures) and run in file order: test 4 takes the nodes from the first
fleet.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.closed_loop import ClosedLoop
from support.fleet_hosts import (
    Rig,
    RotationSampler,
    fleet_rig,
    publish_image,
    pull_everywhere,
    ssh_wrapper,
    stop_router,
)
from support.fleet_rollout import demo_image, rig_hub
from support.realparts import KIMIK3, demo_profile
from support.slurm_cluster import SlurmCluster, slurm_cluster

from kimik3_demo.hub import FixtureHub
from kimik3_reconciler.adapters.router_smg import SmgRouter

# opt-in (support/opt_in.py: KIMIK3_FLEET_SLURM_TEST=1); run under the rig's lock (flock /tmp/k3-fleet-rig.lock).
pytestmark = [pytest.mark.docker, pytest.mark.fleet_slurm]

NAME, PORT = "k3sl-serve", 19371
BUILD_NAME, BUILD_PORT = "k3sl-build", 19372
ROUTER_PORT = 19373  # its metrics on 19374
FLEET = "k3sl"


@pytest.fixture(scope="module")
def bare_rig() -> Iterator[Rig]:
    with fleet_rig(4, prefix="k3sl") as rig:  # h4: a second worker node for the group's test
        yield rig


@pytest.fixture(scope="module")
def hub(bare_rig: Rig) -> Iterator[FixtureHub]:
    with rig_hub() as running:
        yield running


@pytest.fixture(scope="module")
def rig(bare_rig: Rig, tmp_path_factory: pytest.TempPathFactory) -> Rig:
    """The llama.cpp CPU image (the demo's build, cached by layer) built once here, pushed to the bridge registry and
    pulled by digest by every node's daemon at once (as the RPC rig test does): kimik3 finds its images by their
    fingerprint label, so each node's apply finds it and builds nothing."""
    pull_everywhere(
        bare_rig, publish_image(bare_rig, demo_image(tmp_path_factory.mktemp("slurm-build"), BUILD_NAME, BUILD_PORT))
    )
    return bare_rig


@pytest.fixture(scope="module")
def cluster(rig: Rig) -> Iterator[SlurmCluster]:
    with slurm_cluster(rig) as running:
        yield running


def fleet_cmd(work: Path, cluster: SlurmCluster, *args: str, timeout: float = 1500) -> subprocess.CompletedProcess[str]:
    env = {**cluster.env, "KIMIK3_STATE_DIR": str(work / "controller-state")}
    return subprocess.run([*KIMIK3, "fleet", *args], capture_output=True, text=True, env=env, cwd=work, timeout=timeout)


def write_fleet(work: Path, rig: Rig, hub: FixtureHub, quant: str) -> None:
    profile = demo_profile(work, NAME, PORT, hub.url)
    profile["model"]["quant"] = quant
    (work / "profile.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    inventory = rig.inventory("serving")
    del inventory["all"]["children"]["serving"]["hosts"][rig.hosts[3].name]  # three replicas: h1, h2, h3
    for host in rig.hosts[:3]:
        inventory["all"]["children"]["serving"]["hosts"][host.name].update(kimik3_command=list(KIMIK3))
    document = {
        "apiVersion": "kimik3/v1",
        "kind": "Fleet",
        "name": FLEET,
        "profile": "profile.yaml",
        "target": "slurm",
        "slurm": {"partition": "k3gpu"},
        "inventory": inventory,
        "overrides": {
            h.name: {"serve": {"host": h.address}, "model": {"cache_dir": str(h.root / "hf-cache")}}
            for h in rig.hosts[:3]
        },
        "rollout": {"hosts": "serving", "max_unavailable": 1, "drain_timeout": "60s"},
        "router": {"version": "1.13.0", "host": "localhost", "port": ROUTER_PORT, "policy": "round_robin"},
    }
    (work / "fleet.yaml").write_text(yaml.safe_dump(document, sort_keys=False))


def served_quant(rig: Rig, index: int) -> str:
    argv = json.loads(rig.hosts[index].docker("inspect", "-f", "{{json .Config.Cmd}}", NAME))
    return argv[argv.index("-m") + 1]


def job_rows(work: Path, cluster: SlurmCluster) -> list[dict]:
    status = fleet_cmd(work, cluster, "status", "--json", "fleet.yaml")
    return json.loads(status.stdout)["hosts"]


@pytest.fixture(scope="module")
def deployed(
    rig: Rig, hub: FixtureHub, cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    work = tmp_path_factory.mktemp("fleet-slurm")
    write_fleet(work, rig, hub, "UD-Q2_K_XL")
    try:
        first = fleet_cmd(work, cluster, "apply", "--traffic-timeout", "2", "fleet.yaml")
        print(first.stdout, first.stderr[-4000:])
        assert first.returncode == 0, first.stderr[-4000:]
        yield work
    finally:
        stop_router(work, FLEET)


def test_a_first_apply_runs_each_replica_as_a_job_on_its_node(deployed: Path, rig: Rig, cluster: SlurmCluster) -> None:
    rows = job_rows(deployed, cluster)
    assert [(r["host"], r["state"], r["nodes"], r["router"]) for r in rows] == [
        (h.name, "running", h.name, "in rotation") for h in rig.hosts[:3]
    ], rows
    for row, host in zip(rows, rig.hosts[:3]):
        shown = cluster.run("scontrol", "show", "job", row["job"]).stdout
        # The demo is a CPU build (gpus: none): its job asks for no gres (a GPU profile's --gres: tests/unit/fleet).
        assert f"NodeList={host.name}" in shown and "gres/gpu" not in shown, shown
        assert "UD-Q2_K_XL" in served_quant(rig, rig.hosts.index(host))
    # Nothing ran on this machine's own daemon: each job converged its node's.
    assert subprocess.run(["docker", "inspect", NAME], capture_output=True).returncode != 0


def test_a_second_quant_rolls_node_by_node_with_no_failed_request(
    deployed: Path, rig: Rig, hub: FixtureHub, cluster: SlurmCluster
) -> None:
    before = {r["host"]: r["job"] for r in job_rows(deployed, cluster)}
    write_fleet(deployed, rig, hub, "UD-Q4_K_XL")
    router = SmgRouter(f"http://127.0.0.1:{ROUTER_PORT}", f"http://127.0.0.1:{ROUTER_PORT + 1}")
    with (
        ClosedLoop(f"http://127.0.0.1:{ROUTER_PORT}", workers=4, model=NAME) as load,
        RotationSampler(router) as sampler,
    ):
        load.wait_for(8)
        started = time.monotonic()
        rolled = fleet_cmd(deployed, cluster, "apply", "fleet.yaml")
        ended = time.monotonic()
        load.wait_for(load.done() + 8)
    print(
        f"\nslurm rollout of 3 replicas: {ended - started:.0f} s; {len(load.outcomes)} requests, "
        f"{len(load.failed())} failed; in rotation: min {min(sampler.samples)}"
    )
    assert rolled.returncode == 0, rolled.stderr[-4000:]
    rows = job_rows(deployed, cluster)
    assert all(r["state"] == "running" and r["job"] != before[r["host"]] for r in rows), (before, rows)
    assert all("UD-Q4_K_XL" in served_quant(rig, i) for i in range(3))
    assert load.failed() == [], load.failed()[:5]
    assert min(sampler.samples) >= 2, sampler.samples
    assert len(load.between(started, ended)) >= 8


def test_scancel_stops_the_replica_and_the_next_apply_submits_it_again(
    deployed: Path, rig: Rig, cluster: SlurmCluster
) -> None:
    rows = job_rows(deployed, cluster)
    victim = rows[2]
    cluster.run("scancel", victim["job"])
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and rig.hosts[2].docker("inspect", "-f", "{{.State.Running}}", NAME) == "true":
        time.sleep(1)
    assert rig.hosts[2].docker("inspect", "-f", "{{.State.Running}}", NAME) == "false"
    again = fleet_cmd(deployed, cluster, "apply", "--traffic-timeout", "2", "fleet.yaml")
    assert again.returncode == 0, again.stderr[-4000:]
    assert f"{victim['host']}: job" in again.stderr
    rows = job_rows(deployed, cluster)
    assert rows[2]["state"] == "running" and rows[2]["job"] != victim["job"], rows
    assert [r["router"] for r in rows] == ["in rotation"] * 3


GROUP_FLEET, GROUP_NAME, GROUP_PORT, GROUP_ROUTER = "k3slg", "k3slg-serve", 19376, 19377  # router metrics: 19378
WORKER_PORT = 19379


def write_group_fleet(work: Path, rig: Rig, hub: FixtureHub) -> None:
    main, replica, *workers = rig.hosts
    profile = demo_profile(work, GROUP_NAME, GROUP_PORT, hub.url)
    profile["serve"]["n_cpu_moe"] = 2  # the first layers' experts stay on the main server, the rest go to the workers
    (work / "profile.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    inventory = rig.inventory("serving")
    path = f"{ssh_wrapper(work, rig)}:{os.environ['PATH']}"
    for host in workers:  # worker nodes: in the inventory (their node names), not replicas
        del inventory["all"]["children"]["serving"]["hosts"][host.name]
        inventory["all"].setdefault("hosts", {})[host.name] = {"ansible_host": host.address}
    for host in (main, replica):
        inventory["all"]["children"]["serving"]["hosts"][host.name]["kimik3_command"] = ["env", f"PATH={path}", *KIMIK3]
    overrides = {
        h.name: {"serve": {"host": h.address}, "model": {"cache_dir": str(h.root / "hf-cache")}}
        for h in (main, replica)
    }
    overrides[main.name]["rpc"] = {
        "workers": [
            {"name": f"w{i}", "docker": f"ssh://root@{w.address}", "bind": w.address, "port": WORKER_PORT}
            for i, w in enumerate(workers, 1)
        ]
    }
    document = {
        "apiVersion": "kimik3/v1",
        "kind": "Fleet",
        "name": GROUP_FLEET,
        "profile": "profile.yaml",
        "target": "slurm",
        "inventory": inventory,
        "overrides": overrides,
        "rollout": {"hosts": "serving", "max_unavailable": 1, "drain_timeout": "20s"},
        "router": {"version": "1.13.0", "host": "localhost", "port": GROUP_ROUTER, "policy": "round_robin"},
    }
    (work / "fleet.yaml").write_text(yaml.safe_dump(document, sort_keys=False))


def test_a_group_is_one_heterogeneous_job_recreated_when_a_worker_is_cancelled(
    deployed: Path, rig: Rig, hub: FixtureHub, cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    cluster.run("scancel", "--partition", "k3gpu")  # the first fleet's jobs: the nodes are the group's now
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and cluster.run("squeue", "-h", "-t", "R,PD,CG").stdout.strip():
        time.sleep(1)
    work = tmp_path_factory.mktemp("fleet-slurm-group")
    write_group_fleet(work, rig, hub)
    main, replica, w1, w2 = rig.hosts
    try:
        first = fleet_cmd(work, cluster, "apply", "--traffic-timeout", "2", "fleet.yaml")
        assert first.returncode == 0, first.stderr[-4000:]
        rows = {r["host"]: r for r in job_rows(work, cluster)}
        assert (rows[main.name]["state"], rows[main.name]["nodes"]) == ("running", f"{main.name},{w1.name},{w2.name}")
        assert rows[replica.name]["state"] == "running"
        shown = cluster.run("squeue", "-h", "-j", rows[main.name]["job"], "-o", "%i %N").stdout.split("\n")
        # One heterogeneous job: the main component on h1, a worker component on each worker node.
        assert [line.split()[1] for line in shown if line.strip()] == [main.name, w1.name, w2.name], shown
        for index, worker in enumerate((w1, w2), 1):
            assert worker.docker("inspect", "-f", "{{.State.Running}}", f"{GROUP_NAME}-rpc-w{index}") == "true"
        # The workers' step (the hold step on their components) cancelled: the group's job ends, its server stops.
        steps = cluster.run("squeue", "-h", "-s", "-o", "%i %N").stdout.split("\n")
        print("steps:", steps)
        worker_step = next(
            line.split()[0]
            for line in steps
            if line.strip()
            and not line.split()[0].endswith((".batch", ".extern"))
            and line.split()[1] not in (main.name, replica.name)
        )
        print(cluster.run("scancel", worker_step, check=False))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if {r["host"]: r for r in job_rows(work, cluster)}[main.name]["state"] != "running":
                break
            time.sleep(1)
        gone = {r["host"]: r for r in job_rows(work, cluster)}[main.name]
        assert gone["state"] != "running", gone
        again = fleet_cmd(work, cluster, "apply", "--traffic-timeout", "2", "fleet.yaml")
        assert again.returncode == 0, again.stderr[-4000:]
        assert f"{replica.name}: job" not in again.stderr  # only the group was submitted again
        rows = {r["host"]: r for r in job_rows(work, cluster)}
        assert rows[main.name]["state"] == "running" and rows[main.name]["job"] != gone["job"], rows
        assert rows[main.name]["router"] == "in rotation", rows
        answer = httpx_post(f"http://127.0.0.1:{GROUP_ROUTER}/v1/chat/completions", GROUP_NAME)
        assert answer == 200
    finally:
        stop_router(work, GROUP_FLEET)


def httpx_post(url: str, model: str) -> int:
    import httpx

    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    return httpx.post(url, json=body, timeout=120).status_code
