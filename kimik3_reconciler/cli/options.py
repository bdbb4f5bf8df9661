"""Options and texts several commands share: durations, the lock timeout, counts, the exit-code table."""

from __future__ import annotations

import os
import re
import sys

import click

from kimik3_reconciler.model.durations import parse_duration
from kimik3_reconciler.model.env_knobs import knob_value

CHANGES_PENDING = 4
# \b: click prints the block as written (no rewrapping).
EXIT_CODES = """\b
Exit codes:
  0  ok: converged, valid, no changes
  1  a step failed, did not converge, or verify failed
  2  invalid input: profile, plan file or a file it names (nothing touched)
  3  the host gate or the planner refused (nothing touched)
  4  changes pending (plan --detailed-exitcode; bench/tune: the host is not converged)
  5  locked: another kimik3 holds this host's lock
  6  the hub is unreachable or refused a request (its URL is named)
  7  a saved plan is stale: the host or the profile moved since, or the file was edited (nothing touched)
  8  a local file or directory could not be used: no space, read-only, permission, missing (path named)
  130, 143  interrupted by Ctrl-C or SIGTERM: the next apply converges from there"""


def count_option(name: str, default: int, help: str | None = None, least: int = 1):  # noqa: ANN201 - click's decorator
    """An option counting something (requests, tokens, rounds): a whole number of at least `least`, its default
    shown in --help."""
    return click.option(name, type=click.IntRange(min=least), default=default, show_default=True, help=help)


def duration_option(name: str, default: str, help: str | None = None, minimum: float = 1.0):  # noqa: ANN201 - click's decorator
    """An option taking a duration (30s, 3m, 1h30m) of at least `minimum` seconds, its default shown in --help."""
    return click.option(name, type=Duration(minimum=minimum), default=default, show_default=True, help=help)


class Duration(click.ParamType):
    """30s, 3m, 1h30m or seconds; `minimum` refuses what would be a busy loop."""

    name = "duration"

    def __init__(self, minimum: float = 0.0):
        self.minimum = minimum

    def convert(self, value, param, ctx):  # noqa: ANN001, ANN201 - click's signature
        try:
            seconds = value if isinstance(value, float) else parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if seconds < self.minimum:
            self.fail(f"{value} is too short: at least {self.minimum:g}s", param, ctx)
        return seconds


class RegistryAddress(click.ParamType):
    """The site's registry as Docker names one in an image reference, ADDRESS:PORT (a name, an IPv4 address or
    [IPv6]): refused here, not when the first host pushes to it halfway through a rollout."""

    name = "address:port"
    _SHAPE = re.compile(
        r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]+\]):(\d{1,5})"
    )

    def convert(self, value, param, ctx):  # noqa: ANN001, ANN201 - click's signature
        shape = self._SHAPE.fullmatch(str(value))
        if shape is None or not 0 < int(shape.group(1)) < 65536:
            self.fail(f"{value!r} is not ADDRESS:PORT (e.g. 10.0.0.5:5000; no scheme, no path)", param, ctx)
        return str(value)


def _lock_timeout_knob(_ctx: click.Context, _param: click.Parameter, value: float | None) -> float:
    # Not given: KIMIK3_LOCK_TIMEOUT through the knobs' parser (cli.main refused a bad one already), else 0.
    return knob_value("KIMIK3_LOCK_TIMEOUT", os.environ, 0.0) if value is None else value


lock_timeout = click.option(
    "--lock-timeout",
    type=Duration(),
    default=None,
    callback=_lock_timeout_knob,
    show_default="$KIMIK3_LOCK_TIMEOUT, else 0s",
    help="when another kimik3 holds the host lock: wait this long for it (e.g. 10m), then exit 5 naming it",
)


class LazyGroup(click.Group):
    """A command group whose named subcommands are imported when run or listed (click's documented LazyGroup):
    `plan` does not pay for `bench` and `tune` (rich tables, the tuning and benchmark packages)."""

    def __init__(self, *args, lazy: dict[str, str] | None = None, **kwargs):  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.lazy = lazy or {}  # command name -> "module:attribute"
        self.json_command_line = False

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):  # noqa: ANN001, ANN201
        """As click's, and a usage error of a `--json` command line (a missing FILE, an unknown option) also prints
        its JSON error document on stdout (cli/json_out.py says why)."""
        from kimik3_reconciler.console import closed_pipes_dropped

        with closed_pipes_dropped():  # `kimik3 … | head -1`: the rest of the output dropped, the command's own exit
            return self._main(args, prog_name, complete_var, standalone_mode, **extra)

    def _main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):  # noqa: ANN001, ANN201
        from kimik3_reconciler.cli.json_out import usage_error_json, wants_json

        argv = list(sys.argv[1:] if args is None else args)
        self.json_command_line = wants_json(argv)  # for failures before the command's own --json is parsed
        if not standalone_mode or not wants_json(argv):
            return super().main(argv, prog_name, complete_var, standalone_mode, **extra)
        try:
            return super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:
            exc.show()
            usage_error_json(exc)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            import importlib

            module, name = self.lazy[cmd_name].split(":")
            return getattr(importlib.import_module(module), name)
        return super().get_command(ctx, cmd_name)
