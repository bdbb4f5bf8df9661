"""`kimik3 fleet`: one profile served by the hosts of a fleet file (issue 36): validate, plan, status.

Loaded lazily (cli/__init__'s LazyGroup): a host's own commands never import the fleet. `fleet apply` (the Ansible
rollout) joins this group through LAZY_COMMANDS, or `@fleet.command` in this module."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from kimik3_reconciler.cli import _err, _out, _run
from kimik3_reconciler.cli.inputs import read_text
from kimik3_reconciler.cli.options import CHANGES_PENDING, LazyGroup, RegistryAddress, duration_option
from kimik3_reconciler.errors import InputError, ProfileError


def load_fleet(path: str, text: str | None = None):  # noqa: ANN201 - fleet.Fleet (imported here, not at load)
    """The fleet file at `path` (`text`: its content, read already), validated (its profile and each host's
    effective profile too); ProfileError (exit 2) naming `file:line: field` of every problem, InputError when a file
    cannot be read."""
    from kimik3_reconciler.fleet import parse_fleet

    return parse_fleet(read_text(path) if text is None else text, path, read_text)


def validate_fleet(path: str, text: str | None = None) -> dict:
    """One fleet file's verdict for `kimik3 validate` and `kimik3 fleet validate` (problems printed on stderr)."""
    from kimik3_reconciler.cli.json_out import problem_json

    try:
        fleet = load_fleet(path, text)
    except ProfileError as exc:
        for problem in exc.problems:
            _err.print(str(problem), highlight=False)
        return {"file": path, "valid": False, "kind": "fleet", "problems": [problem_json(p) for p in exc.problems]}
    except InputError as exc:
        _err.print(str(exc), highlight=False)
        return {
            "file": path,
            "valid": False,
            "kind": "fleet",
            "problems": [{"file": path, "line": None, "field": "", "message": str(exc)}],
        }
    return {
        "file": path,
        "valid": True,
        "kind": "fleet",
        "problems": [],
        "warnings": [],
        "hosts": [h.name for h in fleet.hosts],
        "batches": [list(b) for b in fleet.rollout.batches()],
    }


# Subcommands in their own modules, imported when run (`apply`: the Ansible rollout, "module:attribute").
LAZY_COMMANDS: dict[str, str] = {}


@click.group(cls=LazyGroup, lazy=LAZY_COMMANDS)
def fleet() -> None:
    """One profile served by the hosts of a fleet file (an Ansible inventory behind a router)."""


@fleet.command(name="validate")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--json", "json_out", is_flag=True, help="print each file's verdict and problems as JSON on stdout")
@_run
def validate_cmd(files: tuple[str, ...], json_out: bool) -> None:
    """Check fleet files (and the profile each serves, per host) without touching a host (exit 2 if one is invalid)."""
    verdicts = [validate_fleet(path) for path in files]
    for verdict in verdicts:
        if verdict["valid"] and not json_out:
            _out.print(
                f"{verdict['file']}: ok ({len(verdict['hosts'])} hosts; batches "
                + " → ".join(",".join(b) for b in verdict["batches"])
                + ")",
                highlight=False,
            )
    failed = not all(v["valid"] for v in verdicts)
    if json_out:
        click.echo(json.dumps({"ok": not failed, "files": verdicts}, indent=2))
    if failed:
        sys.exit(2)


@fleet.command(name="schema")
def schema_cmd() -> None:
    """Print the fleet file's JSON Schema."""
    from kimik3_reconciler.fleet import fleet_json_schema

    click.echo(json.dumps(fleet_json_schema(), indent=2))


# A host whose plan or status could not be had (unreachable, another kimik3, its command refused), or the fleet's
# router not answering as its layout wants (`fleet status`): named, exit 3.
HOST_FAILED = 3


def _answers(fleet, words: tuple[str, ...], timeout_s: float):  # noqa: ANN001, ANN202 - fleet.Fleet -> answers
    from kimik3_reconciler.adapters.ssh_shell import SshShell
    from kimik3_reconciler.cli.inputs import kimik3_identity
    from kimik3_reconciler.fleet.gather import ask, gather

    shell, identity = SshShell(), kimik3_identity()
    return gather(fleet.hosts, lambda host: ask(shell, host, words, identity, timeout_s))


def _server_readings(fleet, answers) -> dict:  # noqa: ANN001 - each running server's /metrics, read at once
    from kimik3_reconciler.adapters.http import HttpClient
    from kimik3_reconciler.fleet.gather import gather
    from kimik3_reconciler.fleet.server_load import read_server

    running = {
        a.host for a in answers if a.ok and ((a.document or {}).get("container") or {}).get("state") == "running"
    }
    http = HttpClient()
    hosts = [h for h in fleet.hosts if h.name in running]
    return dict(zip((h.name for h in hosts), gather(hosts, lambda h: read_server(h, lambda url: http.get(url)))))


def _router_line(fleet, state_dir: Path) -> dict:  # noqa: ANN001 - fleet.Fleet
    """The router as the fleet file lays it out (policy, kimik3's router and smg's addresses), what answers, and
    whether that is what the layout wants (`ok`; else `message`: the router down fails `fleet status`)."""
    from kimik3_reconciler.cli.fleet_router import record_path, recorded_supervisor, router_now, router_problem
    from kimik3_reconciler.fleet.router_layout import router_layout

    layout = router_layout(fleet.router)
    now = router_now(layout)
    started = record_path(state_dir, fleet.name).exists()
    problem = router_problem(layout, now, started)
    answering = now if started or now != "nothing" else "nothing (not started yet)"
    line = {
        "policy": layout.policy,
        "layout": layout.describe(),
        "answering": answering,
        "supervisor": recorded_supervisor(state_dir, fleet.name),  # systemd, keeper, none; None: not started
        "ok": problem is None,
    }
    return line if problem is None else {**line, "message": f"router: {problem}"}


def _router_rows(fleet) -> dict:  # noqa: ANN001 - fleet.Fleet -> {host name: fleet.report.RouterRow}
    from kimik3_reconciler.cli.fleet_apply import router_rows

    return router_rows(fleet)


@fleet.command(name="plan")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "json_out", is_flag=True, help="print each host's plan and the rollout's price as JSON")
@click.option(
    "--detailed-exitcode",
    is_flag=True,
    help="exit 4 when a host's plan has changes, 0 when none (a host not planned: 3)",
)
@duration_option("--timeout", "10m", "longest a host's own plan may take")
@click.option(
    "--registry",
    default=None,
    type=RegistryAddress(),
    help="price the rollout as `fleet apply --registry` makes it: the image built once, pulled by the later hosts",
)
@click.pass_context
@_run
def plan_cmd(
    ctx: click.Context, file: str, json_out: bool, detailed_exitcode: bool, timeout: float, registry: str | None
) -> None:
    """Each host's own plan (made there over SSH, in parallel) and the rollout priced: order, downtime, duration,
    capacity, bytes (and, with --registry, who builds, pushes and pulls the image); then the router: what answers
    now and what `fleet apply` changes of it."""
    from pathlib import Path

    from kimik3_reconciler.cli.fleet_router import router_change
    from kimik3_reconciler.fleet.host_plan import read_host_plan
    from kimik3_reconciler.fleet.pricing import price_rollout
    from kimik3_reconciler.fleet.report import plan_document, plan_lines

    fleet = load_fleet(file)
    answers = _answers(fleet, ("plan",), timeout)
    plans = {a.host: read_host_plan(a.host, a.document) for a in answers if a.ok}
    price = price_rollout(fleet.rollout, plans, registry)
    router = router_change(fleet, Path(ctx.obj["state_dir"]))
    if json_out:
        click.echo(json.dumps({**plan_document(fleet, answers, plans, price), "router": router}, indent=2))
    else:
        for line in plan_lines(fleet, answers, plans, price):
            _out.print(line, highlight=False)
        _out.print(f"router: {router['change'] or router['wanted'] + ' (as it runs: no change)'}", highlight=False)
    for answer in answers:
        if not answer.ok:
            _err.print(f"error: {answer.message}", highlight=False)
    if not all(a.ok for a in answers):
        sys.exit(HOST_FAILED)
    if detailed_exitcode and not all(p.converged for p in plans.values()):
        sys.exit(CHANGES_PENDING)


@fleet.command(name="status")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "json_out", is_flag=True, help="print one row per host as JSON")
@click.option("--watch", is_flag=True, help="redraw the table every --interval; Ctrl-C ends")
@duration_option("--interval", "5s", "--watch refresh", minimum=0.5)
@click.option("--iterations", type=int, default=0, hidden=True, help="--watch: stop after N refreshes (tests)")
@duration_option("--timeout", "60s", "longest a host's status may take")
@click.pass_context
@_run
def status_cmd(
    ctx: click.Context, file: str, json_out: bool, watch: bool, interval: float, iterations: int, timeout: float
) -> None:
    """One row per host: fingerprint, quant, build, kimik3 version, health, requests in flight, prefix-cache hits
    (its server's own counters), router state, drift (each host's own `kimik3 status`, over SSH, in parallel); then
    the fleet's prefix-cache hits."""
    import time

    from kimik3_reconciler.fleet.report import fleet_prefix_cache, status_lines, status_row

    if watch and json_out:
        raise click.UsageError("--watch is a live table; --json prints the rows once")
    fleet = load_fleet(file)
    if fleet.target == "slurm":  # the replicas are jobs: the scheduler says what runs where (cli/fleet_slurm.py)
        from kimik3_reconciler.cli.fleet_slurm import print_status

        if not print_status(fleet, json_out):
            sys.exit(HOST_FAILED)
        return
    shown = 0
    while True:
        answers = _answers(fleet, ("status",), timeout)
        router = _router_rows(fleet)
        layout = _router_line(fleet, Path(ctx.obj["state_dir"]))
        readings = _server_readings(fleet, answers)
        rows = [
            status_row(
                fleet,
                a,
                router,
                getattr(readings.get(a.host), "in_flight", None),
                getattr(readings.get(a.host), "prefix_cache", None),
            )
            for a in answers
        ]
        if json_out:
            document = {
                "fleet": fleet.name,
                "ok": all(r["ok"] for r in rows) and layout["ok"],
                "hosts": rows,
                "prefix_cache": fleet_prefix_cache(rows),
                "router": layout,
            }
            click.echo(json.dumps(document, indent=2))
        else:
            if watch and _out.is_terminal:
                click.clear()
            for line in status_lines(rows):
                _out.print(line, highlight=False)
            kept = f"; kept by {layout['supervisor']}" if layout["supervisor"] else ""
            _out.print(f"router: {layout['layout']} ({layout['answering']} answers{kept})", highlight=False)
        shown += 1
        if not watch or (iterations and shown >= iterations):
            break
        time.sleep(interval)
    for row in rows:
        if not row["ok"]:
            _err.print(f"error: {row['message']}", highlight=False)
    if not layout["ok"]:
        _err.print(f"error: {layout['message']}", highlight=False)
    if not all(r["ok"] for r in rows) or not layout["ok"]:
        sys.exit(HOST_FAILED)


def _add_apply() -> None:
    """`fleet apply` and its hidden `router-step` (cli/fleet_apply.py: the rollout through Ansible)."""
    from kimik3_reconciler.cli import fleet_image, fleet_mirror
    from kimik3_reconciler.cli.fleet_apply import register
    from kimik3_reconciler.cli.fleet_router import keep_cmd, route_cmd
    from kimik3_reconciler.cli.fleet_slurm import job_step

    register(fleet)
    fleet.add_command(route_cmd)
    fleet.add_command(keep_cmd)
    fleet.add_command(job_step)
    fleet_mirror.register(fleet)
    fleet_image.register(fleet)


_add_apply()


def _add_recover() -> None:
    """`fleet recover` (cli/fleet_recover.py: a group whose RPC worker died, re-converged behind the router)."""
    from kimik3_reconciler.cli.fleet_recover import recover_cmd

    fleet.add_command(recover_cmd)


_add_recover()


def _add_render() -> None:
    """`fleet render --target kubernetes` (cli/fleet_render.py: the manifests a GitOps repo commits)."""
    from kimik3_reconciler.cli.fleet_render import render_cmd

    fleet.add_command(render_cmd)


_add_render()
