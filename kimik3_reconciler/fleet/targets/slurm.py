"""The Slurm target: each replica is a job pinned to its node, its GPUs the profile's (`--gres=gpu:N`); a llama.cpp
main server with its RPC workers is one heterogeneous job (the main node, then one component per worker node).

What runs in the job is the same `kimik3 apply` as on a bare host: the job's batch step is `kimik3 fleet job-step
PROFILE` (cli/fleet_slurm.py), which applies the profile on its node, says the outcome in the job's comment
(`kimik3:<digest>:apply=<exit code>`), then holds the server for the job's life: scancel stops it, and a server (or,
in a group, a worker's step) that ends ends the job. The job's arguments are argv words (sbatch passes them to a
fixed `exec "$@"` script): no shell line is made of a profile's fields.

`fleet apply` replaces replicas node by node with the rollout's own steps: out of the router (the capacity floor,
the drain), the old job cancelled, the new one submitted and its apply awaited, the gates `converged` and `verify`
run inside the job (`srun --overlap` on its node), back in the router; a gate that fails leaves the replica's own
revert (its kimik3 apply's) serving, puts it back and halts. A replica whose job is gone (a worker's step cancelled,
the node lost) is rolled again by the next `fleet apply`, whatever the record says.

The effects come through `SlurmJobs` and `ReplicaRouter` (the CLI wires sbatch/squeue/scancel/srun and smg in)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kimik3_reconciler.errors import StepError
from kimik3_reconciler.fleet.groups import worker_address
from kimik3_reconciler.fleet.inventory import read_inventory
from kimik3_reconciler.fleet.targets import Replica
from kimik3_reconciler.fleet.targets.slurm_section import SlurmSection
from kimik3_reconciler.fleet.values import Fleet, FleetHost

# The job's batch script: its arguments run as they are (sbatch passes them after the script's path).
JOB_SCRIPT = '#!/bin/sh\nexec "$@"\n'
COMMENT_PREFIX = "kimik3:"
LIVE = ("RUNNING", "PENDING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING")
GATES = (("converged", ("plan", "--detailed-exitcode")), ("verify", ("verify",)))


class SlurmJobs(Protocol):
    """The cluster, as the target uses it (adapters/slurm_cli.py: sbatch, scancel, squeue --json, srun)."""

    def submit(self, argv: Sequence[str]) -> str: ...

    def cancel(self, job: str) -> None: ...

    def jobs(self) -> Sequence[Mapping[str, Any]]: ...

    def in_job(
        self, job: str, node: str, argv: Sequence[str], timeout_s: float, heterogeneous: bool = False
    ) -> tuple[int, str, str]: ...


class ReplicaRouter(Protocol):
    """The rollout's router steps: out (the floor, the drain), and in (recorded done, or failed at `failed_gate`)."""

    def take_out(self, host: FleetHost) -> str: ...

    def put_back(self, host: FleetHost, failed_gate: str | None) -> str: ...


def digest(host: FleetHost) -> str:
    """What a replica's job serves: its effective profile's hash (a job serving another profile is replaced)."""
    return hashlib.sha256(host.profile_text.encode()).hexdigest()[:16]


def job_name(fleet: Fleet, host: FleetHost) -> str:
    section = fleet.slurm or SlurmSection()
    return f"{section.job_prefix}-{fleet.name}-{host.name}"


def worker_nodes(fleet: Fleet, host: FleetHost) -> tuple[str, ...]:
    """The node of each of `host`'s RPC workers: the inventory host whose address (or name) its Docker URL names,
    else that name itself (a node the inventory does not list)."""
    by_address: dict[str, str] = {}
    for entry in read_inventory(fleet.inventory).hosts:
        by_address[entry.name.lower()] = entry.name
        by_address.setdefault(str(entry.vars.get("ansible_host") or entry.name).lower(), entry.name)
    return tuple(by_address.get(worker_address(w), worker_address(w)) for w in host.profile.workers)


def _component(section: SlurmSection, node: str, gpus: Any) -> list[str]:
    words = ["--nodelist", node, "--nodes", "1", "--ntasks", "1"]
    words += ["--partition", section.partition] if section.partition else []
    words += ["--account", section.account] if section.account else []
    if isinstance(gpus, (list, tuple)) and gpus:
        words += ["--gres", f"{section.gres}:{len(gpus)}"]
    return words


def submit_argv(fleet: Fleet, host: FleetHost, script: str, output: str, step: Sequence[str]) -> list[str]:
    """sbatch's arguments for `host`'s replica: its node and GPUs, then (a group) one component per worker node with
    the worker's GPUs; the job's name and comment; `script` (JOB_SCRIPT) and the step's argv after it."""
    section = fleet.slurm or SlurmSection()
    words = [
        "--parsable",
        "--job-name",
        job_name(fleet, host),
        "--comment",
        f"{COMMENT_PREFIX}{digest(host)}",
        "--output",
        output,
        *_component(section, host.name, host.profile.gpus),
    ]
    for worker, node in zip(host.profile.workers, worker_nodes(fleet, host)):
        words += [":", *_component(section, node, worker.gpus)]
    return [*words, script, *step]


def step_argv(host: FleetHost, profile_file: str) -> list[str]:
    """The job's step: kimik3 on the node (the inventory's kimik3_command) applying and holding the replica."""
    return [
        *host.kimik3_command,
        "fleet",
        "job-step",
        "--digest",
        digest(host),
        "--workers",
        str(len(host.profile.workers)),
        profile_file,
    ]


@dataclass(frozen=True)
class Job:
    """One replica's job as squeue shows it: its id (a group's: the first component's), every component's state and
    nodes, its comment (what it serves, and its apply's exit code once known)."""

    job_id: str
    name: str
    states: tuple[str, ...]
    nodes: tuple[str, ...]
    comment: str

    @property
    def state(self) -> str:
        """running when every component runs; else the first that does not."""
        return next((s for s in self.states if s != "RUNNING"), "RUNNING").lower()

    @property
    def live(self) -> bool:
        return any(s in LIVE for s in self.states)

    @property
    def serves(self) -> str:
        return (
            self.comment.removeprefix(COMMENT_PREFIX).split(":")[0] if self.comment.startswith(COMMENT_PREFIX) else ""
        )

    @property
    def applied(self) -> int | None:
        """The exit code of the job's `kimik3 apply` (None: not yet done)."""
        for part in self.comment.split(":")[2:]:
            if part.startswith("apply="):
                return int(part.removeprefix("apply="))
        return None


def _state_of(raw: Mapping[str, Any]) -> str:
    state = raw.get("job_state")
    return str(state[0] if isinstance(state, list) and state else state or "UNKNOWN")


def read_jobs(raw_jobs: Sequence[Mapping[str, Any]]) -> tuple[Job, ...]:
    """squeue --json's jobs as replica jobs, a heterogeneous job's components folded into one (by het_job_id)."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for raw in raw_jobs:
        key = str(raw.get("het_job_id") or raw.get("job_id"))
        groups.setdefault(key, []).append(raw)
    jobs = []
    for key, parts in groups.items():
        parts.sort(key=lambda r: int(r.get("het_job_offset") or 0))
        first = parts[0]
        jobs.append(
            Job(
                key,
                str(first.get("name") or ""),
                tuple(_state_of(p) for p in parts),
                tuple(str(p.get("nodes") or "") for p in parts),
                str(first.get("comment") or ""),
            )
        )
    return tuple(sorted(jobs, key=lambda j: int(j.job_id) if j.job_id.isdigit() else 0))


def replica_jobs(fleet: Fleet, jobs: Sequence[Job]) -> dict[str, Job]:
    """Each host's newest live job (or its newest ended one, when none lives)."""
    found: dict[str, Job] = {}
    for host in fleet.hosts:
        mine = [j for j in jobs if j.name == job_name(fleet, host)]
        live = [j for j in mine if j.live]
        if live or mine:
            found[host.name] = (live or mine)[-1]
    return found


def replica(host: FleetHost, job: Job | None) -> Replica:
    if job is None:
        return Replica(host.name, "absent", detail="no job")
    applied = job.applied
    detail = (
        "serves another profile"
        if job.serves != digest(host)
        else "applying"
        if applied is None and job.state == "running"
        else f"apply exited {applied}"
        if applied
        else ""
    )
    return Replica(
        host.name, job.state if job.live else f"ended ({job.state})", ",".join(job.nodes), job.job_id, detail
    )


def to_roll(fleet: Fleet, jobs: Sequence[Job]) -> tuple[str, ...]:
    """The hosts whose replica is not a running job serving their effective profile (inventory order)."""
    current = replica_jobs(fleet, jobs)
    return tuple(
        h.name
        for h in fleet.hosts
        if (job := current.get(h.name)) is None or job.state != "running" or job.serves != digest(h)
    )


class SlurmTarget:
    """fleet/targets.Target on a Slurm cluster (module docstring)."""

    name = "slurm"

    def __init__(
        self,
        slurm: SlurmJobs,
        router: ReplicaRouter,
        files: Callable[[FleetHost], tuple[str, str, str]],
        say: Callable[[str], None],
        apply_timeout_s: float = 1800.0,
        gate_timeout_s: float = 600.0,
        poll_s: float = 1.0,
    ) -> None:
        # files(host) -> (the job script, the job's output file, the host's effective profile file): paths every
        # node reads (a Slurm cluster's shared filesystem, as its job scripts and output files are).
        self.slurm, self.router, self.files, self.say = slurm, router, files, say
        self.apply_timeout_s, self.gate_timeout_s, self.poll_s = apply_timeout_s, gate_timeout_s, poll_s

    def jobs(self) -> tuple[Job, ...]:
        return read_jobs(self.slurm.jobs())

    def replicas(self, fleet: Fleet) -> dict[str, Replica]:
        current = replica_jobs(fleet, self.jobs())
        return {h.name: replica(h, current.get(h.name)) for h in fleet.hosts}

    def roll(self, fleet: Fleet, batches: Sequence[Sequence[str]]) -> None:
        for batch in batches:
            hosts = [fleet.host(name) for name in batch]
            for host in hosts:
                self.say(f"{host.name}: {self.router.take_out(host)}")
            for host in hosts:
                failed = self.replace(fleet, host)
                self.say(f"{host.name}: {self.router.put_back(host, failed)}")
                if failed and fleet.rollout.on_failure == "halt":
                    return

    def replace(self, fleet: Fleet, host: FleetHost) -> str | None:
        """`host`'s job cancelled and submitted again with its effective profile, its apply awaited and gated in the
        job; the gate that failed (None: all passed)."""
        for job in self.jobs():  # every live job of this replica (one left by a killed run too)
            if job.name == job_name(fleet, host) and job.live:
                self.slurm.cancel(job.job_id)
                self._until(lambda j=job: not self._live(j.job_id), f"job {job.job_id} to end", 120.0)
                self.say(f"{host.name}: job {job.job_id} cancelled")
        script, output, profile_file = self.files(host)
        job_id = self.slurm.submit(submit_argv(fleet, host, script, output, step_argv(host, profile_file)))
        self.say(f"{host.name}: job {job_id} submitted ({job_name(fleet, host)})")
        code = self._applied(job_id)
        if code != 0:
            self.say(f"{host.name}: gate apply failed in job {job_id} ({'no answer' if code is None else code})")
            return "gate: apply"
        for gate, words in GATES:
            code, out, err = self.slurm.in_job(
                job_id,
                host.name,
                [*host.kimik3_command, *words, profile_file],
                self.gate_timeout_s,
                heterogeneous=bool(host.profile.workers),  # a group's gates run on its main component
            )
            if code != 0:
                last = (err.strip() or out.strip()).splitlines()[-1:] or [""]
                self.say(f"{host.name}: gate {gate} failed (exit {code}: {last[0]})")
                return f"gate: {gate}"
            self.say(f"{host.name}: gate {gate} passed")
        return None

    def _live(self, job_id: str) -> bool:
        return any(j.job_id == job_id and j.live for j in self.jobs())

    def _applied(self, job_id: str) -> int | None:
        """The job's apply exit code once it says it; None when the job ended (or timed out) without saying."""
        deadline = time.monotonic() + self.apply_timeout_s
        while time.monotonic() < deadline:
            job = next((j for j in self.jobs() if j.job_id == job_id), None)
            if job is not None and job.applied is not None:
                return job.applied
            if job is not None and not job.live:
                return None
            time.sleep(self.poll_s)
        return None

    def _until(self, done: Callable[[], bool], what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > deadline:
                raise StepError(f"waited {timeout_s:.0f} s for {what}")
            time.sleep(self.poll_s)
