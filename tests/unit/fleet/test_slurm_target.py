"""The Slurm target (issue 41 items 1, 3): the fleet file's `target: slurm`, the sbatch arguments of a replica and of
a main + RPC workers group (one heterogeneous job), squeue's answer read into replicas, and the node-by-node rollout
decided with an in-memory cluster and router (the real ones: tests/integration/test_fleet_slurm.py)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from kimik3_reconciler.cli.inputs import read_text
from kimik3_reconciler.errors import ProfileError
from kimik3_reconciler.fleet import parse_fleet
from kimik3_reconciler.fleet.targets.slurm import (
    JOB_SCRIPT,
    SlurmTarget,
    digest,
    read_jobs,
    replica_jobs,
    step_argv,
    submit_argv,
    to_roll,
)

DEMO = Path(__file__).parents[3] / "profiles" / "demo-cpu.yaml"


def _gpu_profile() -> str:
    """The demo profile as a CUDA build serving GPUs 0 and 1."""
    return (
        DEMO.read_text()
        .replace("variant: cpu", 'variant: cuda\n  cuda_architectures: ["90"]')
        .replace("  cpu_features: []", "  # cpu_features")
        .replace("gpus: none", "gpus: [0, 1]")
    )


FLEET = """\
apiVersion: kimik3/v1
kind: Fleet
name: f
profile: p.yaml
target: slurm
slurm: {partition: gpu, account: lab}
inventory:
  all:
    children:
      serving:
        hosts: {n1: {ansible_host: 10.0.0.1}, n2: {ansible_host: 10.0.0.2}, n3: {ansible_host: 10.0.0.3}}
      workers:
        hosts: {w1: {ansible_host: 10.0.0.11}, w2: {ansible_host: 10.0.0.12}}
overrides:
  n1:
    serve: {host: 10.0.0.1}
    rpc:
      workers:
        - {name: wa, docker: "ssh://k3@10.0.0.11", bind: 10.0.0.11, gpus: [0]}
        - {name: wb, docker: "ssh://k3@10.0.0.12", bind: 10.0.0.12, gpus: [0, 1, 2]}
  n2: {serve: {host: 10.0.0.2}}
  n3: {serve: {host: 10.0.0.3}}
rollout: {hosts: serving}
router: {version: "1.13.0"}
"""


def _fleet(tmp_path: Path, text: str = FLEET, profile: str | None = None):  # noqa: ANN202 - fleet.Fleet
    (tmp_path / "p.yaml").write_text(profile if profile is not None else _gpu_profile())
    (tmp_path / "fleet.yaml").write_text(text)
    return parse_fleet(text, str(tmp_path / "fleet.yaml"), read_text)


def test_a_fleet_file_without_target_is_ansible_as_before(tmp_path: Path) -> None:
    fleet = _fleet(
        tmp_path, FLEET.replace("target: slurm\n", "").replace("slurm: {partition: gpu, account: lab}\n", "")
    )
    assert (fleet.target, fleet.slurm) == ("ansible", None)


def test_gpus_all_is_refused_on_slurm_at_the_hosts_override(tmp_path: Path) -> None:
    text = FLEET.replace("  n2: {serve: {host: 10.0.0.2}}", "  n2: {serve: {host: 10.0.0.2}, gpus: all}")
    with pytest.raises(ProfileError) as refused:
        _fleet(tmp_path, text)
    [problem] = refused.value.problems
    assert (problem.line, problem.field) == (21, "overrides.n2.gpus")
    assert "gpus: all cannot be asked of Slurm" in problem.message


def test_a_bad_slurm_section_is_refused_by_field_and_line(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as refused:
        _fleet(tmp_path, FLEET.replace("account: lab", "acount: lab"))
    [problem] = refused.value.problems
    assert (problem.line, problem.field) == (6, "slurm.acount")


def test_a_replica_is_one_job_pinned_to_its_node_with_its_profiles_gpus(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)
    n2 = fleet.host("n2")
    argv = submit_argv(fleet, n2, "/s/job.sh", "/s/n2-%j.out", step_argv(n2, "/s/n2.yaml"))
    assert argv == [
        "--parsable",
        "--job-name",
        "kimik3-f-n2",
        "--comment",
        f"kimik3:{digest(n2)}",
        "--output",
        "/s/n2-%j.out",
        *("--nodelist", "n2", "--nodes", "1", "--ntasks", "1", "--partition", "gpu", "--account", "lab"),
        *("--gres", "gpu:2"),
        "/s/job.sh",
        *("kimik3", "fleet", "job-step", "--digest", digest(n2), "--workers", "0", "/s/n2.yaml"),
    ]
    assert JOB_SCRIPT == '#!/bin/sh\nexec "$@"\n'  # the step's words are arguments, never a shell line


def test_a_group_is_one_heterogeneous_job_main_then_a_component_per_worker_node(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)
    n1 = fleet.host("n1")
    argv = submit_argv(fleet, n1, "/s/job.sh", "/s/out", step_argv(n1, "/s/n1.yaml"))
    components = " ".join(argv).split(" : ")
    assert len(components) == 3
    assert "--nodelist n1 " in components[0] and "--gres gpu:2" in components[0]
    # The workers' nodes are the inventory hosts their Docker URLs name, each with its own worker's GPUs.
    assert components[1] == "--nodelist w1 --nodes 1 --ntasks 1 --partition gpu --account lab --gres gpu:1"
    assert components[2].startswith("--nodelist w2 --nodes 1 --ntasks 1 --partition gpu --account lab --gres gpu:3 ")
    assert components[2].split(" /s/job.sh ")[1].split() == [
        *("kimik3", "fleet", "job-step", "--digest", digest(n1), "--workers", "2", "/s/n1.yaml")
    ]


def _raw(job_id: int, name: str, state: str, nodes: str, comment: str = "", het: tuple[int, int] | None = None) -> dict:
    raw = {"job_id": job_id, "name": name, "job_state": state, "nodes": nodes, "comment": comment}
    if het:
        raw.update(het_job_id=het[0], het_job_offset=het[1])
    return raw


def test_squeue_jobs_fold_a_heterogeneous_job_and_say_what_to_roll(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)
    n1, n2, n3 = fleet.hosts
    raw = [
        _raw(7, "kimik3-f-n1", "RUNNING", "n1", f"kimik3:{digest(n1)}:apply=0", (7, 0)),
        _raw(8, "kimik3-f-n1", "RUNNING", "w1", "", (7, 1)),
        _raw(9, "kimik3-f-n1", "CANCELLED", "w2", "", (7, 2)),  # a worker's component gone: the group is not whole
        _raw(10, "kimik3-f-n2", "RUNNING", "n2", f"kimik3:{digest(n2)}:apply=0"),
        _raw(11, "kimik3-f-n3", "RUNNING", "n3", "kimik3:0123456789abcdef:apply=0"),  # another profile
        _raw(12, "someone-else", "RUNNING", "n3"),
    ]
    jobs = read_jobs(raw)
    group = replica_jobs(fleet, jobs)["n1"]
    assert (group.job_id, group.states, group.nodes, group.state, group.applied) == (
        "7",
        ("RUNNING", "RUNNING", "CANCELLED"),
        ("n1", "w1", "w2"),
        "cancelled",
        0,
    )
    assert to_roll(fleet, jobs) == ("n1", "n3")
    assert to_roll(fleet, [j for j in jobs if j.name != "kimik3-f-n3"]) == ("n1", "n3")  # no job: rolled too


class FakeCluster:
    """In memory: jobs submitted run at once and their apply exits with `apply_code`; gates exit `gate_codes`."""

    def __init__(self, fleet, apply_code: int = 0, gate_codes: dict | None = None) -> None:  # noqa: ANN001
        self.fleet, self.apply_code, self.gate_codes = fleet, apply_code, gate_codes or {}
        self.raw: list[dict] = []
        self.log: list[str] = []

    def submit(self, argv: Sequence[str]) -> str:
        job = str(100 + len(self.raw))
        name = argv[argv.index("--job-name") + 1]
        comment = argv[argv.index("--comment") + 1]
        self.raw.append(_raw(int(job), name, "RUNNING", name.rsplit("-", 1)[1], f"{comment}:apply={self.apply_code}"))
        self.log.append(f"submit {name}")
        return job

    def cancel(self, job: str) -> None:
        for raw in self.raw:
            if str(raw["job_id"]) == job:
                raw["job_state"] = "CANCELLED"
        self.log.append(f"cancel {job}")

    def jobs(self) -> Sequence[dict]:
        return list(self.raw)

    def in_job(
        self, job: str, node: str, argv: Sequence[str], timeout_s: float, heterogeneous: bool = False
    ) -> tuple[int, str, str]:
        gate = "converged" if "plan" in argv else "verify"
        self.log.append(f"{gate} {node} in {job}" + (" (main component)" if heterogeneous else ""))
        return self.gate_codes.get((node, gate), 0), "", "no" if self.gate_codes.get((node, gate)) else ""


class FakeRouter:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def take_out(self, host) -> str:  # noqa: ANN001
        self.log.append(f"out {host.name}")
        return "out"

    def put_back(self, host, failed_gate: str | None) -> str:  # noqa: ANN001
        self.log.append(f"in {host.name}" + (f" failed {failed_gate}" if failed_gate else ""))
        return "in"


def _target(cluster: FakeCluster) -> SlurmTarget:
    return SlurmTarget(
        cluster,
        FakeRouter(cluster.log),
        lambda host: ("/s/job.sh", f"/s/{host.name}.out", f"/s/{host.name}.yaml"),
        lambda line: None,
        poll_s=0.0,
    )


def test_a_rollout_replaces_each_job_between_router_out_and_in_gates_run_in_the_job(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path, FLEET.replace("rollout: {hosts: serving}", "rollout: {hosts: serving, canary: n2}"))
    cluster = FakeCluster(fleet)
    cluster.raw.append(_raw(5, "kimik3-f-n2", "RUNNING", "n2", "kimik3:old:apply=0"))
    _target(cluster).roll(fleet, fleet.rollout.batches(("n2", "n3")))
    assert cluster.log == [
        "out n2",
        "cancel 5",
        "submit kimik3-f-n2",
        "converged n2 in 101",
        "verify n2 in 101",
        "in n2",
        "out n3",
        "submit kimik3-f-n3",
        "converged n3 in 102",
        "verify n3 in 102",
        "in n3",
    ]
    assert to_roll(fleet, read_jobs(cluster.raw)) == ("n1",)


def test_a_failed_gate_puts_the_reverted_replica_back_and_halts(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)
    cluster = FakeCluster(fleet, gate_codes={("n2", "verify"): 1})
    _target(cluster).roll(fleet, fleet.rollout.batches(("n2", "n3")))
    assert cluster.log[-2:] == ["verify n2 in 100", "in n2 failed gate: verify"]
    assert "out n3" not in cluster.log


def test_an_apply_that_failed_in_the_job_is_the_apply_gate(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)
    cluster = FakeCluster(fleet, apply_code=1)
    _target(cluster).roll(fleet, fleet.rollout.batches(("n3",)))
    assert cluster.log == ["out n3", "submit kimik3-f-n3", "in n3 failed gate: apply"]


def test_a_groups_gates_run_on_its_main_component(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)
    cluster = FakeCluster(fleet)
    _target(cluster).roll(fleet, fleet.rollout.batches(("n1",)))
    assert cluster.log[2:4] == ["converged n1 in 100 (main component)", "verify n1 in 100 (main component)"]


def test_srun_names_the_main_component_of_a_heterogeneous_job_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from kimik3_reconciler.adapters import slurm_cli

    ran: list[list[str]] = []

    def run(argv: Sequence[str], timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        ran.append(list(argv))
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(slurm_cli, "_run", run)
    slurm_cli.SlurmCli().in_job("7", "n1", ["kimik3", "verify", "p.yaml"], 60.0, heterogeneous=True)
    slurm_cli.SlurmCli().in_job("8", "n2", ["kimik3", "verify", "p.yaml"], 60.0)
    # srun refuses a heterogeneous job's step without --het-group, and a plain job's with it (22.05).
    assert ran[0][:4] == ["srun", "--jobid", "7", "--het-group=0"] and ran[0][-3:] == ["kimik3", "verify", "p.yaml"]
    assert not any(word.startswith("--het-group") for word in ran[1])


def test_the_workers_hold_step_ends_every_worker_task_when_one_is_lost() -> None:
    from kimik3_reconciler.cli.fleet_slurm import hold_argv

    assert hold_argv(2, ["kimik3"], "/s/n1.yaml") == [
        *("--kill-on-bad-exit=1", "--het-group=1-2"),
        *("kimik3", "fleet", "job-step", "--hold", "/s/n1.yaml"),
    ]
    assert hold_argv(1, ["kimik3"], "/s/n1.yaml")[1] == "--het-group=1"


class FakeRunner:
    def __init__(self, code: int = 0, fail: bool = False) -> None:
        self.code, self.fail, self.written, self.ran = code, fail, {}, []

    def write(self, documents: dict) -> None:
        self.written.update(documents)

    def run(self, playbook_name: str, inventory_name: str) -> int:
        self.ran.append((playbook_name, inventory_name))
        if self.fail and playbook_name == "playbook.yaml":
            raise KeyboardInterrupt
        return self.code


def test_the_ansible_target_runs_the_rollout_playbook_then_stops_the_mirrors_whatever_happens(tmp_path: Path) -> None:
    from kimik3_reconciler.fleet.playbook import RolloutHost, RouterStep
    from kimik3_reconciler.fleet.targets.ansible import AnsibleTarget

    fleet = _fleet(
        tmp_path, FLEET.replace("target: slurm\n", "").replace("slurm: {partition: gpu, account: lab}\n", "")
    )
    hosts = [
        RolloutHost(h.name, {"ansible_host": h.address}, ("kimik3",), "http://x:1", "/p.yaml") for h in fleet.hosts
    ]
    step = RouterStep(("kimik3", "fleet", "router-step"), "http://r", "http://m", 60.0, 2)
    runner = FakeRunner(code=2)
    target = AnsibleTarget(runner, hosts, step)
    batches = fleet.rollout.batches()
    target.render(fleet, batches)
    target.roll(fleet, batches)
    assert target.code == 2 and target.replicas(fleet) == {}
    assert runner.ran == [("playbook.yaml", "inventory.json"), ("mirrors-stop.yaml", "inventory.json")]
    assert runner.written["playbook.yaml"][-1]["serial"] == [1, 1, 1]
    interrupted = FakeRunner(fail=True)
    with pytest.raises(KeyboardInterrupt):
        AnsibleTarget(interrupted, hosts, step).roll(fleet, batches)
    assert interrupted.ran[-1] == ("mirrors-stop.yaml", "inventory.json")
