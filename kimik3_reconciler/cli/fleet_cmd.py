"""`kimik3 fleet`: one profile served by the hosts of a fleet file (issue 36): validate, plan, status.

Loaded lazily (cli/__init__'s LazyGroup): a host's own commands never import the fleet. `fleet apply` is added to
this group by the rollout (Ansible) side."""

from __future__ import annotations

import json
import sys

import click

from kimik3_reconciler.cli import _err, _out, _run
from kimik3_reconciler.cli.inputs import read_text
from kimik3_reconciler.errors import InputError, ProfileError


def load_fleet(path: str):  # noqa: ANN201 - fleet.Fleet (the fleet package is imported here, not at module load)
    """The fleet file at `path`, validated (its profile and each host's effective profile too); ProfileError (exit
    2) naming `file:line: field` of every problem, InputError when a file cannot be read."""
    from kimik3_reconciler.fleet import parse_fleet

    return parse_fleet(read_text(path), path, read_text)


def validate_fleet(path: str) -> dict:
    """One fleet file's verdict for `kimik3 validate` and `kimik3 fleet validate` (problems printed on stderr)."""
    from kimik3_reconciler.cli.json_out import problem_json

    try:
        fleet = load_fleet(path)
    except ProfileError as exc:
        for problem in exc.problems:
            _err.print(str(problem), highlight=False)
        return {"file": path, "valid": False, "kind": "fleet", "problems": [problem_json(p) for p in exc.problems]}
    except InputError as exc:
        _err.print(str(exc), highlight=False)
        return {"file": path, "valid": False, "kind": "fleet",
                "problems": [{"file": path, "line": None, "field": "", "message": str(exc)}]}
    return {"file": path, "valid": True, "kind": "fleet", "problems": [], "warnings": [],
            "hosts": [h.name for h in fleet.hosts], "batches": [list(b) for b in fleet.rollout.batches()]}


@click.group()
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
            _out.print(f"{verdict['file']}: ok ({len(verdict['hosts'])} hosts; batches "
                       + " → ".join(",".join(b) for b in verdict["batches"]) + ")", highlight=False)
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
