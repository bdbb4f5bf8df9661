"""The Slurm target wired (fleet/targets/slurm.py): `fleet apply` and `fleet status` on a `target: slurm` fleet, and
the hidden `kimik3 fleet job-step PROFILE`, what a replica's job runs on its node.

job-step: in a group (main + RPC workers, one heterogeneous job), first a step on the worker components that holds
them (`job-step --hold`); then `kimik3 apply PROFILE` (the same apply as on a bare host: its health wait, verify and
revert); its exit code into the job's comment; then the server held for the job's life: a SIGTERM (scancel, the
time limit) stops the server's container, and a server that stops, or a worker step that ends, ends the job (a
replica the scheduler shows as running serves)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import click

from kimik3_reconciler.cli import _err, _out, _run
from kimik3_reconciler.errors import StepError

HOLD_POLL_S = 5.0  # how often the held server (and a group's worker step) is looked at


class _SlurmRouter:
    """fleet/targets/slurm.ReplicaRouter over smg: the rollout's own router steps (cli/fleet_apply.py), the record
    written as `router-step in` writes it."""

    def __init__(self, fleet, record_path: Path, traffic_timeout_s: float) -> None:  # noqa: ANN001 - fleet.Fleet
        from kimik3_reconciler.adapters.router_smg import SmgRouter
        from kimik3_reconciler.cli.fleet_apply import _router_urls

        url, metrics_url, _, _ = _router_urls(fleet)
        self.fleet, self.router, self.record_path = fleet, SmgRouter(url, metrics_url), record_path
        self.traffic_timeout_s = traffic_timeout_s

    def take_out(self, host) -> str:  # noqa: ANN001 - fleet.FleetHost
        from kimik3_reconciler.cli.fleet_apply import _take_out, server_in_flight, server_key, worker_url
        from kimik3_reconciler.engines import engine_for

        url = worker_url(host)
        series = engine_for(host.profile.engine).series
        policy = self.fleet.rollout
        _take_out(
            self.router,
            host.name,
            url,
            policy.drain_timeout_s,
            policy.min_serving,
            server_in_flight(url, (series.running, series.waiting), server_key(host.profile, host.name)),
        )
        return "router: out"

    def put_back(self, host, failed_gate: str | None) -> str:  # noqa: ANN001 - fleet.FleetHost
        from kimik3_reconciler.cli.fleet_apply import _put_back, _read_record, _write_record, server_key, worker_url

        url, key = worker_url(host), server_key(host.profile, host.name)
        rotation = _put_back(self.router, host.name, url, self.traffic_timeout_s, api_key=key)
        record = _read_record(self.record_path)
        if failed_gate:
            record["failed"] = {"host": host.name, "gate": failed_gate, "rotation": rotation}
        elif host.name not in record.setdefault("done", []):
            record["done"].append(host.name)
        _write_record(self.record_path, record)
        return f"router: in ({rotation})"

    def close(self) -> None:
        self.router.close()


def _files(run_dir: Path):  # noqa: ANN202 - FleetHost -> (script, output, profile file)
    from kimik3_reconciler.fleet.targets.slurm import JOB_SCRIPT

    script = run_dir / "job.sh"
    script.write_text(JOB_SCRIPT)
    script.chmod(0o755)

    def files(host) -> tuple[str, str, str]:  # noqa: ANN001 - fleet.FleetHost
        profile = run_dir / f"{host.name}.yaml"
        profile.write_text(host.profile_text)
        return str(script), str(run_dir / f"{host.name}-%j.out"), str(profile)

    return files


def slurm_target(fleet, run_dir: Path, record_path: Path, traffic_timeout_s: float):  # noqa: ANN001, ANN201
    """The fleet's SlurmTarget: Slurm's clients, smg through the rollout's router steps, the job files in
    `run_dir` (on a filesystem the nodes share: the controller's state dir)."""
    from kimik3_reconciler.adapters.slurm_cli import SlurmCli
    from kimik3_reconciler.fleet.targets.slurm import SlurmTarget

    run_dir.mkdir(parents=True, exist_ok=True)
    router = _SlurmRouter(fleet, record_path, traffic_timeout_s)
    return SlurmTarget(SlurmCli(), router, _files(run_dir), lambda line: _err.print(line, highlight=False)), router


def slurm_batches(fleet) -> list[tuple[str, ...]]:  # noqa: ANN001 - fleet.Fleet
    """The rollout's batches over the replicas whose job does not run their effective profile (the scheduler's
    state is what says a replica is done: a group whose worker was cancelled is rolled again)."""
    from kimik3_reconciler.adapters.slurm_cli import SlurmCli
    from kimik3_reconciler.fleet.targets.slurm import read_jobs, to_roll

    return [tuple(b) for b in fleet.rollout.batches(to_roll(fleet, read_jobs(SlurmCli().jobs())))]


def status_rows(fleet) -> list[dict]:  # noqa: ANN001 - fleet.Fleet
    """One row per replica: its job, state, nodes, and the router's view of it."""
    from kimik3_reconciler.adapters.slurm_cli import SlurmCli
    from kimik3_reconciler.cli.fleet_apply import router_rows
    from kimik3_reconciler.fleet.targets.slurm import read_jobs, replica, replica_jobs

    jobs = replica_jobs(fleet, read_jobs(SlurmCli().jobs()))
    router = router_rows(fleet)
    rows = []
    for host in fleet.hosts:
        seen = replica(host, jobs.get(host.name))
        rows.append(
            {
                "host": host.name,
                "ok": seen.state == "running" and not seen.detail,
                "job": seen.job,
                "state": seen.state,
                "nodes": seen.where,
                "detail": seen.detail,
                "router": router[host.name].state if host.name in router else "no router",
            }
        )
    return rows


def print_status(fleet, json_out: bool) -> bool:  # noqa: ANN001 - fleet.Fleet
    rows = status_rows(fleet)
    ok = all(r["ok"] for r in rows)
    if json_out:
        click.echo(json.dumps({"fleet": fleet.name, "target": "slurm", "ok": ok, "hosts": rows}, indent=2))
        return ok
    _out.print(f"{'HOST':<16} {'JOB':<8} {'STATE':<18} {'NODES':<24} {'ROUTER':<14} DETAIL", highlight=False)
    for r in rows:
        _out.print(
            f"{r['host']:<16} {r['job'] or '-':<8} {r['state']:<18} {r['nodes'] or '-':<24} {r['router']:<14} "
            f"{r['detail']}",
            highlight=False,
        )
    return ok


@click.command(name="job-step", hidden=True)
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--digest", default="", help="the effective profile's hash, said in the job's comment")
@click.option("--workers", default=0, type=int, help="the heterogeneous job's worker components (after the main)")
@click.option("--hold", is_flag=True, help="a worker component's step: hold the node until the job ends")
@_run
def job_step(file: str, digest: str, workers: int, hold: bool) -> None:
    """Run in a replica's Slurm job: apply the profile on this node, then hold its server for the job's life."""
    stop = {"signal": None}

    def on_signal(signum: int, _frame: object) -> None:
        stop["signal"] = signum

    # scancel and the time limit send SIGTERM (then SIGKILL after KillWait): the server is stopped in between.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if hold:
        while stop["signal"] is None:
            time.sleep(0.5)
        # This node's rpc-server (started by the main node's apply through this node's Docker) goes with the step.
        _stop_workers(_container_name(file))
        return
    from kimik3_reconciler.adapters.slurm_cli import run_step, set_comment

    job = os.environ.get("SLURM_JOB_ID", "")
    kimik3 = [sys.executable, "-m", "kimik3_reconciler"]
    held = None
    if workers:
        held = run_step(hold_argv(workers, kimik3, file))
    code = subprocess.run([*kimik3, "apply", file], check=False).returncode
    name = _container_name(file)
    if job:
        try:
            set_comment(job, f"kimik3:{digest}:apply={code}")
        except StepError:
            # Unsaid, the rollout would wait for this apply until its timeout: the job ends now, its server with it.
            _stop(name)
            raise
    click.echo(f"job-step: kimik3 apply exited {code}; holding the server")
    why = ""
    while stop["signal"] is None:
        if held is not None and held.poll() is not None:
            why = f"a worker step ended (exit {held.returncode})"
            break
        if not _running(name):
            why = f"its server ({name}) is not running"
            break
        time.sleep(HOLD_POLL_S)
    _stop(name)
    # The workers' step is left to the job's end: Slurm then sends its tasks SIGTERM (SIGKILL only after KillWait),
    # so each stops its node's rpc-server. srun, signalled itself, kills its tasks outright (seen on 22.05: "forcing
    # job termination", the tasks "Killed"), which would leave the rpc-servers running on nodes Slurm calls free.
    if why:
        click.echo(f"job-step: {why}: the job ends", err=True)
        sys.exit(1)


def hold_argv(workers: int, kimik3: list[str], file: str) -> list[str]:
    """srun's words for the workers' hold step: one task on each worker component (1..workers) holding its node."""
    groups = "1" if workers == 1 else f"1-{workers}"
    # One worker lost is the group lost: without --kill-on-bad-exit, srun waits on the other components' tasks after
    # one was cancelled (`scancel JOB.STEP` kills it), so the step (and the job) would run on with a worker gone
    # (seen on 22.05 with two worker components). With it, srun ends the others' tasks and exits.
    return ["--kill-on-bad-exit=1", f"--het-group={groups}", *kimik3, "fleet", "job-step", "--hold", file]


def _container_name(file: str) -> str:
    from kimik3_reconciler.cli.inputs import load

    return load(file).profile.name


def _running(name: str) -> bool:
    import docker

    try:
        return docker.from_env().containers.get(name).status == "running"
    except docker.errors.DockerException:
        return False


def _stop(name: str) -> None:
    """The server's container stopped, kept (the node's next apply replaces it, or its revert restarts it)."""
    import docker

    try:
        docker.from_env().containers.get(name).stop(timeout=10)
    except docker.errors.DockerException:
        pass


def _stop_workers(name: str) -> None:
    """The profile's rpc-server containers on this node's Docker (named <profile>-rpc-<worker>) stopped."""
    import docker

    try:
        for container in docker.from_env().containers.list(filters={"name": f"{name}-rpc-"}):
            container.stop(timeout=10)
    except docker.errors.DockerException:
        pass
