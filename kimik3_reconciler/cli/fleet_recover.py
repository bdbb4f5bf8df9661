"""`kimik3 fleet recover FILE [--watch]` (issue 36 item 6, issue 41 item 4): a group whose member died (an RPC
worker, a cluster node) leaves the router, is re-converged by its main host's `kimik3 apply` (which recreates the
member with the server) and gated, and comes back.

The decisions are fleet/recovery.py's; this wires them: each group's state from its main host's `kimik3 status
--json` (over SSH, all at once: `fleet status`'s gathering), smg through the rollout's own router steps, the main
host's kimik3 over SSH with its effective profile on stdin. Each pass holds the fleet lock (never beside a rollout);
`--watch` passes again every `--interval`, and a pass that finds the lock held (a `fleet apply` running) waits for
the next."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path

import click

from kimik3_reconciler.cli import _err, _out, _run
from kimik3_reconciler.cli.options import duration_option
from kimik3_reconciler.errors import Kimik3Error, LockHeld, StepError


class _Router:
    """fleet/recovery.GroupRouter over smg: the rollout's own out (no floor: min_serving 0) and in."""

    def __init__(self, fleet, drain_timeout_s: float, traffic_timeout_s: float) -> None:  # noqa: ANN001
        from kimik3_reconciler.adapters.router_smg import SmgRouter
        from kimik3_reconciler.cli.fleet_apply import _router_urls

        url, metrics_url, _, _ = _router_urls(fleet)
        self.router = SmgRouter(url, metrics_url)
        self.drain_timeout_s, self.traffic_timeout_s = drain_timeout_s, traffic_timeout_s

    def take_out(self, host) -> str:  # noqa: ANN001 - fleet.FleetHost
        from kimik3_reconciler.cli.fleet_apply import _take_out, server_in_flight, server_key, worker_url
        from kimik3_reconciler.engines import engine_for

        url = worker_url(host)
        if self.router.find(url) is None:
            return "not in the router"
        # As the rollout's `router: out` (and Slurm's): the drain waits for the server's own running and queued
        # requests (a member died: its server may not answer /metrics, then it is not waited on).
        series = engine_for(host.profile.engine).series
        in_flight = server_in_flight(url, (series.running, series.waiting), server_key(host.profile, host.name))
        _take_out(self.router, host.name, url, self.drain_timeout_s, 0, in_flight)
        return "taken out of the router"

    def put_back(self, host) -> str:  # noqa: ANN001
        from kimik3_reconciler.cli.fleet_apply import _put_back, worker_url

        return "back " + _put_back(self.router, host.name, worker_url(host), self.traffic_timeout_s)

    def close(self) -> None:
        self.router.close()


def _say(line: str) -> None:
    _err.print(line, highlight=False)


def _pass(fleet, state_dir: Path, timeout: float, drain: float, traffic: float, json_out: bool) -> bool:  # noqa: ANN001
    """One look at every group and the recovery of the dead ones; True when nothing is left dead or failed."""
    from kimik3_reconciler.adapters.ansible_play import FleetLock
    from kimik3_reconciler.adapters.ssh_shell import SshShell
    from kimik3_reconciler.cli.fleet_apply import _read_record, _write_record
    from kimik3_reconciler.cli.fleet_cmd import _answers
    from kimik3_reconciler.fleet.groups import member_states
    from kimik3_reconciler.fleet.recovery import recover, to_recover

    with FleetLock(state_dir / "fleet" / fleet.name / "lock"):
        answers = _answers(fleet, ("status",), timeout)
        groups = {a.host: member_states(fleet.host(a.host), a.document if a.ok else None) for a in answers}
        groups = {name: states for name, states in groups.items() if states}
        # The groups earlier passes took out and did not put back: their members may look up now, yet they are
        # out of the router until they pass the gates (without this record a failed gate left a group out for good).
        record = state_dir / "fleet" / fleet.name / "recovering.json"
        pending = set(_read_record(record).get("out", ()))
        dead = to_recover(fleet, answers, pending)
        # Written before any group leaves the router: a pass killed between out and in leaves it recorded.
        _write_record(record, {"out": sorted(pending | set(dead))})
        for name, states in groups.items():
            if name not in dead:
                _say(f"{name}: members {'; '.join(s.text() for s in states)}")
        recovered = ()
        if dead:
            router = _Router(fleet, drain, traffic)
            try:
                # --json: stdout carries the one document; the router steps' lines (click.echo) go to stderr.
                with contextlib.redirect_stdout(sys.stderr) if json_out else contextlib.nullcontext():
                    recovered = recover(fleet, dead, router, SshShell(), timeout, _say)
            finally:
                router.close()
        _write_record(record, {"out": sorted((pending | set(dead)) - {r.host for r in recovered if r.ok})})
        for r in recovered:
            (_out if r.ok and not json_out else _err).print(r.message, highlight=False)
        if json_out:
            click.echo(
                json.dumps(
                    {
                        "fleet": fleet.name,
                        "groups": {n: [s.text() for s in states] for n, states in groups.items()},
                        "recovered": [
                            {"host": r.host, "ok": r.ok, "failed": r.failed, "message": r.message} for r in recovered
                        ],
                    },
                    indent=2,
                )
            )
        return all(r.ok for r in recovered)


@click.command(name="recover")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--watch", is_flag=True, help="look again every --interval (a supervisor's loop); Ctrl-C ends")
@duration_option("--interval", "15s", "--watch: between passes")
@click.option("--iterations", type=int, default=0, hidden=True, help="--watch: stop after N passes (tests)")
@duration_option("--timeout", "30m", "longest one command on a main host may take (its apply loads the model again)")
@duration_option("--traffic-timeout", "30s")
@click.option("--json", "json_out", is_flag=True, help="print each pass's groups and recoveries as JSON on stdout")
@click.pass_context
@_run
def recover_cmd(
    ctx: click.Context,
    file: str,
    watch: bool,
    interval: float,
    iterations: int,
    timeout: float,
    traffic_timeout: float,
    json_out: bool,
) -> None:
    """Groups whose RPC worker or cluster node died: out of the router, re-converged on their main host, gated, back in."""
    from kimik3_reconciler.cli.fleet_cmd import load_fleet
    from kimik3_reconciler.fleet.groups import spans

    state_dir = Path(ctx.obj["state_dir"])
    fleet = load_fleet(file)
    if not any(spans(h.profile) for h in fleet.hosts):
        if json_out:  # --json's stdout is always the document, an empty one here
            click.echo(json.dumps({"fleet": fleet.name, "groups": {}, "recovered": []}, indent=2))
            return
        _out.print(f"{fleet.name}: no host has RPC workers or cluster nodes: nothing to recover", highlight=False)
        return
    passes = 0
    while True:
        try:
            ok = _pass(fleet, state_dir, timeout, fleet.rollout.drain_timeout_s, traffic_timeout, json_out)
        except LockHeld as exc:
            if not watch:
                raise
            _say(f"{exc}: looking again in {interval:g} s")
            ok = True
        except Kimik3Error as exc:
            # --watch is the supervisor's loop: a pass the router or a host failed (router down, SSH refused) is
            # said and tried again; the groups it took out are recorded, so the next pass takes them up.
            if not watch:
                raise
            _say(f"error: {exc}: looking again in {interval:g} s")
            ok = False
        passes += 1
        if not watch:
            if not ok:
                raise StepError(f"{fleet.name}: a group failed its recovery (named above): it stays out of the router")
            return
        if iterations and passes >= iterations:
            sys.exit(0 if ok else 1)
        time.sleep(interval)
