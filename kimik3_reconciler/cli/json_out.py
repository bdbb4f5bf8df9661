"""`--json` output when a command fails: one JSON document on stdout, whatever failed.

GitOps CI pipes `kimik3 plan --json` (and validate, apply, status, verify, destroy, prune, explain, bench,
tune) into a JSON parser. A failure that printed its message on stderr only left stdout empty, which no parser
accepts: the job failed on "Expecting value" instead of the reason. So every failure of a `--json` command also
prints {"ok": false, "error": {...}} on stdout (the human message stays on stderr, the exit code is the one the
error carries), including click's usage errors (a missing FILE, an unknown option).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from kimik3_reconciler.errors import Kimik3Error, ProfileError, ProfileProblem


def problem_json(problem: ProfileProblem) -> dict[str, Any]:
    return {"file": problem.source, "line": problem.line, "field": problem.field, "message": problem.message}


def error_document(message: str, exit_code: int, kind: str, problems: tuple[ProfileProblem, ...] = ()) -> dict:
    error: dict[str, Any] = {"type": kind, "message": message, "exit_code": exit_code}
    if problems:
        error["problems"] = [problem_json(p) for p in problems]
    return {"ok": False, "error": error}


def kimik3_error_document(exc: Kimik3Error) -> dict:
    problems = exc.problems if isinstance(exc, ProfileError) else ()
    return error_document(str(exc), exc.exit_code, type(exc).__name__, problems)


def emit(document: dict) -> None:
    click.echo(json.dumps(document, indent=2))
    sys.stdout.flush()


def wants_json(argv: list[str]) -> bool:
    """`--json` among the command line's options (before a `--`)."""
    words = argv[: argv.index("--")] if "--" in argv else argv
    return "--json" in words


def usage_error_json(exc: click.ClickException) -> None:
    """A usage error of a `--json` command line: the same document, exit code click's (2: invalid input)."""
    emit(error_document(exc.format_message(), exc.exit_code, type(exc).__name__))
