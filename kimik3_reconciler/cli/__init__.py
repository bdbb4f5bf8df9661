"""The `kimik3` command: parse, load the profile, call the orchestrator, render, map errors to exit codes.

Exit codes: the table in errors.py's docstring (also `EXIT_CODES` below, printed by `kimik3 --help`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import sys
import threading
from contextlib import nullcontext
from pathlib import Path

import click

from kimik3_reconciler.cli.inputs import (
    check_made_by,
    check_not_made_up,
    check_pinned,
    check_plan_target,
    kimik3_identity,
    load,
    parse_text,
    profile_text_now,
    read_text,
    write_plan,
)
from kimik3_reconciler.cli.options import CHANGES_PENDING, EXIT_CODES, Duration, LazyGroup, lock_timeout
from kimik3_reconciler.console import Stream
from kimik3_reconciler.console import Styled as Text
from kimik3_reconciler.errors import InputError, Kimik3Error, LocalFileError, ProfileError, VerifyFailed
from kimik3_reconciler.model.env_knobs import command_words, knob_value, refuse_bad_knobs
from kimik3_reconciler.model.fleet_kind import is_fleet_text
from kimik3_reconciler.model.plan_file import read_saved_plan
from kimik3_reconciler.orchestrator import Orchestrator
from kimik3_reconciler.render import render_plan, render_status, status_document
from kimik3_reconciler.reporting import CliReporter, configure_logging

_REHASH_HELP = "re-hash the cached model files against the hub's sha256 (slow: reads every byte)"
# soft_wrap: never break a line (messages are grepped in CI logs); no markup from messages.
_err = Stream(stderr=True)  # rich Consoles (soft_wrap, no markup, no highlight), made when rich is needed
_out = Stream()


def _default_state_dir() -> str:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return str(Path(base) / "kimik3")


def _default_dockerfile() -> str:
    # The file beside the package (importlib.resources would import zipfile for a package that is never zipped:
    # docker builds from a real path).
    return str(Path(__file__).parents[1] / "Dockerfile.llamacpp")


class _Context:
    def __init__(
        self,
        state_dir: str,
        dockerfile: str,
        docker_host: str | None,
        verbose: bool,
        json_out: bool,
        systemd_root: str = "/",
        systemctl_prefix: tuple[str, ...] = (),
    ):
        self.state_dir, self.dockerfile, self.docker_host = Path(state_dir), Path(dockerfile), docker_host
        self.verbose, self.json_out = verbose, json_out
        self.systemd_root, self.systemctl_prefix = systemd_root, systemctl_prefix

    def orchestrator(self, profile_path: str) -> Orchestrator:
        from kimik3_reconciler.adapters import real_ports

        interactive = _err.is_terminal and not self.json_out
        # The events as structlog lines (JSON off a terminal) only for a machine: -v or --json; else plain lines.
        machine = self.verbose or self.json_out
        configure_logging(json_logs=not interactive, verbose=self.verbose, human=not machine)
        reporter = CliReporter(_err, interactive, self.verbose, machine=machine)
        ports = real_ports(self.state_dir, self.docker_host, self.systemd_root, self.systemctl_prefix)
        return Orchestrator(ports, reporter, Path(profile_path).resolve().parent, self.dockerfile)


def _fail(exc: Kimik3Error, json_out: bool) -> None:
    """The message on stderr; with --json also the error as JSON on stdout (cli/json_out.py); exit its code."""
    _err.print(Text("error: ", style="red") + Text(str(exc)))
    if json_out:
        from kimik3_reconciler.cli.json_out import emit, kimik3_error_document

        emit(kimik3_error_document(exc))
    sys.exit(exc.exit_code)


def _unexpected(exc: Exception, json_out: bool) -> None:
    """An exception outside kimik3's error tree: its traceback (what a bug report needs) and a one-line message on
    stderr, and with --json still the one JSON document on stdout; exit 1 (a step failed). A --json caller got an
    empty stdout and a traceback here (issue 39: the Docker daemon gone mid-build)."""
    import traceback

    from kimik3_reconciler.model.profile_rules.no_secrets import starred

    # A foreign message may quote what kimik3 never prints (requests' InvalidHeader quotes `Bearer hf_…`).
    sys.stderr.write(starred("".join(traceback.format_exception(exc)), os.environ))
    message = starred(
        f"unexpected {type(exc).__name__}: {exc} (not one of kimik3's own errors: the traceback above says where)",
        os.environ,
    )
    _err.print(Text("error: ", style="red") + Text(message))
    if json_out:
        from kimik3_reconciler.cli.json_out import emit, error_document

        emit(error_document(message, 1, type(exc).__name__))
    sys.exit(1)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt, so both unwind the same way."""


def _terminate_as_interrupt(_signum: int, _frame: object) -> None:
    # systemd, docker, CI runners and `timeout` stop a command with SIGTERM. Python's default dies at once: exit 143,
    # no message, no `finally` (the build's pre-read readers, the watchers). Raised as Ctrl-C's exception instead,
    # it unwinds through the same cleanup and the same message. `reconcile` and `metrics-serve` set their own.
    raise Terminated()


def _interrupted(exc: KeyboardInterrupt, json_out: bool) -> None:
    """Ctrl-C or SIGTERM mid-command: what the host is left with, and exit 128 + the signal."""
    name, code = ("SIGTERM", 143) if isinstance(exc, Terminated) else ("SIGINT (Ctrl-C)", 130)
    message = (
        f"interrupted by {name}: the step in progress stopped where it was; `kimik3 apply` again converges "
        "from there (downloads resume, a half-built image is built again, a loading server is waited for)"
    )
    _err.print(Text("error: ", style="red") + Text(message))
    if json_out:
        from kimik3_reconciler.cli.json_out import emit, error_document

        emit(error_document(message, code, "Interrupted"))
    sys.stdout.flush()
    sys.stderr.flush()
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.current_thread()):
        # Workers still mid-transfer (a download's files): the interpreter would join them at exit, minutes for a
        # large shard, while `timeout`, `docker stop` or systemd wait to SIGKILL. Their work is resumable (the
        # next apply continues each .incomplete, as after a kill -9), so leave without them.
        os._exit(code)
    sys.exit(code)


def _json_wanted(kwargs: dict) -> bool:
    """The command's --json; for the group's own callback (a bad KIMIK3_* value, refused before any command
    parses its options) the command line's, so `--json` still gets its JSON error document."""
    if "json_out" in kwargs:
        return bool(kwargs["json_out"])
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and getattr(ctx.find_root().command, "json_command_line", False))


def _run(fn):  # noqa: ANN001 - click callback wrapper
    """Map kimik3's error tree to messages and exit codes; never a traceback for expected failures."""

    def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003
        try:
            return fn(*args, **kwargs)
        except Kimik3Error as exc:
            _fail(exc, _json_wanted(kwargs))
        except OSError as exc:  # ENOSPC, EROFS, EACCES, a missing state dir...: the path and what to do, no traceback
            _fail(LocalFileError.from_os_error(exc), _json_wanted(kwargs))
        except KeyboardInterrupt as exc:
            _interrupted(exc, _json_wanted(kwargs))
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise  # click's own: a usage error (exit 2, its JSON document from LazyGroup.main), ctx.exit, an abort
        except Exception as exc:  # noqa: BLE001 - a bug or an SDK error no adapter translated: still the contract
            _unexpected(exc, _json_wanted(kwargs))

    wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
    return wrapper


def _command_words(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[str, ...] | None:
    try:
        return None if value is None else command_words(value) if value.strip() else ()  # '' = here
    except ValueError as exc:  # an unclosed quote: click's usage error (exit 2), not a traceback
        raise click.BadParameter(str(exc)) from None


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"kimik3 {kimik3_identity()}")  # `kimik3 fleet` compares it with each host's
        ctx.exit()


@click.group(
    cls=LazyGroup,
    epilog=EXIT_CODES,
    lazy={
        "bench": "kimik3_reconciler.cli.bench_cmd:bench",
        "tune": "kimik3_reconciler.cli.tune_cmd:tune",
        "pin": "kimik3_reconciler.cli.pin_cmd:pin",
        "fleet": "kimik3_reconciler.cli.fleet_cmd:fleet",
    },
)
@click.option(
    "--state-dir",
    default=None,
    show_default="$KIMIK3_STATE_DIR, else ~/.local/state/kimik3",
    help="where kimik3 keeps its records (verified model manifests, fetched archives)",
)
@click.option(
    "--dockerfile",
    default=None,
    help="Dockerfile.llamacpp to build (default: $KIMIK3_DOCKERFILE, else the one beside the package)",
)
@click.option(
    "--docker-host", envvar="DOCKER_HOST", default=None, help="docker daemon URL (default: DOCKER_HOST / socket)"
)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="show NOOP steps with their reasons, and apply's events as log "
    "lines (JSON off a terminal) with the build's output",
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="print this kimik3's version and code digest, and exit",
)
@click.option(
    "--systemd-root",
    default=None,
    show_default="$KIMIK3_SYSTEMD_ROOT, else /",
    help="install root for units (ROOT/etc/systemd/system) and their env files (ROOT/etc/kimik3)",
)
@click.option(
    "--systemctl-prefix",
    default=None,
    callback=_command_words,
    help="run systemctl through this command, e.g. 'docker exec sd' or 'ssh host' (default: "
    "$KIMIK3_SYSTEMCTL_PREFIX, else here)",
)
@click.pass_context
@_run
def main(
    ctx: click.Context,
    state_dir: str | None,
    dockerfile: str | None,
    docker_host: str | None,
    verbose: bool,
    systemd_root: str | None,
    systemctl_prefix: tuple[str, ...] | None,
) -> None:
    """kimik3: converge a host to a Kimi-K3 deployment profile.

    Engines: llama.cpp (Unsloth's GGUF quants; llama-server built from pinned source in Docker, experts on the GPUs
    or the CPU), vLLM and SGLang (the native checkpoint; their image pulled by digest). A profile's `engine:` picks
    one; `kimik3 routes` says which this host can run. Start with `kimik3 validate FILE`, then `plan`, `apply`."""
    # A bad KIMIK3_* value (KIMIK3_DOWNLOAD_WORKERS=0, an unclosed quote in a prefix) is refused here, naming
    # the variable, before any command observes or changes anything (exit 2).
    refuse_bad_knobs(os.environ)
    if threading.current_thread() is threading.main_thread():  # signal.signal raises anywhere else (an embedder's)
        signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    ctx.obj = {
        "state_dir": state_dir or str(knob_value("KIMIK3_STATE_DIR", os.environ) or _default_state_dir()),
        "dockerfile": dockerfile or str(knob_value("KIMIK3_DOCKERFILE", os.environ) or _default_dockerfile()),
        "docker_host": docker_host,
        "verbose": verbose,
        "systemd_root": systemd_root or str(knob_value("KIMIK3_SYSTEMD_ROOT", os.environ, "/")),
        "systemctl_prefix": (
            systemctl_prefix if systemctl_prefix is not None else knob_value("KIMIK3_SYSTEMCTL_PREFIX", os.environ, ())
        ),
    }


def _verbose_here(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.obj["verbose"] = True  # the group's option, given after the command name
    return value


# `kimik3 apply -v FILE` as well as `kimik3 -v apply FILE`: people put the flag after the command.
verbose_here = click.option(
    "-v",
    "--verbose",
    is_flag=True,
    expose_value=False,
    callback=_verbose_here,
    help="show NOOP steps with their reasons, and the events as log lines with the build's output (as `kimik3 -v`)",
)


def _ctx(click_ctx: click.Context, json_out: bool) -> _Context:
    return _Context(**click_ctx.obj, json_out=json_out)


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--json", "json_out", is_flag=True, help="print each file's verdict, problems and warnings as JSON on stdout"
)
@_run
def validate(files: tuple[str, ...], json_out: bool) -> None:
    """Check profiles (and fleet files: `kind: Fleet`) without touching the host (exit 2 if any is invalid).

    A branch, tag or image tag where a pin goes is a warning (`kimik3 pin FILE` resolves it; plan and apply refuse
    it); a made-up commit or digest (0123456789abcdef…, sha256:000…) is refused."""
    from kimik3_reconciler.cli.json_out import emit, problem_json

    verdicts = []
    for path in files:
        try:
            text = read_text(path)  # once: /dev/stdin reads only once
            if is_fleet_text(text):  # a fleet file: its own checks (cli/fleet_cmd.py), its profile's per host
                from kimik3_reconciler.cli.fleet_cmd import validate_fleet

                verdicts.append(validate_fleet(path, text))
                if verdicts[-1]["valid"] and not json_out:
                    _out.print(f"{path}: ok (fleet of {len(verdicts[-1]['hosts'])} hosts)", highlight=False)
                continue
            loaded = check_not_made_up(load(path, pinned=False, text=text))
        except ProfileError as exc:
            verdicts.append({"file": path, "valid": False, "problems": [problem_json(p) for p in exc.problems]})
            for problem in exc.problems:
                _err.print(str(problem), highlight=False)
            continue
        except InputError as exc:  # unreadable file: report it and go on with the others
            verdicts.append(
                {
                    "file": path,
                    "valid": False,
                    "problems": [{"file": path, "line": None, "field": "", "message": str(exc)}],
                }
            )
            _err.print(str(exc), highlight=False)
            continue
        for warning in loaded.warnings:
            _err.print(f"{path}: warning: {warning}", highlight=False)
        verdicts.append({"file": path, "valid": True, "problems": [], "warnings": [str(w) for w in loaded.warnings]})
        if not json_out:
            _out.print(f"{path}: ok", highlight=False)
    failed = not all(v["valid"] for v in verdicts)
    if json_out:
        emit({"ok": not failed, "files": verdicts})
    if failed:
        sys.exit(2)


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "json_out", is_flag=True, help="print the plan as JSON on stdout")
@click.option(
    "--detailed-exitcode",
    is_flag=True,
    help=f"exit {CHANGES_PENDING} when the plan has changes, 0 when none (errors: their own codes)",
)
@click.option("--verify", "rehash", is_flag=True, help=_REHASH_HELP)
@click.option("-v", "--verbose", is_flag=True, help="also show NOOP steps and why nothing is needed")
@click.option(
    "-out",
    "--out",
    "out",
    type=click.Path(dir_okay=False),
    metavar="PLAN",
    help="save the plan to this file: `kimik3 apply PLAN` executes exactly it, or refuses it as stale",
)
@click.pass_context
@_run
def plan(
    ctx: click.Context, file: str, json_out: bool, detailed_exitcode: bool, rehash: bool, verbose: bool, out: str | None
) -> None:
    """Show what apply would change, and why."""
    if out:
        check_plan_target(out)  # before the host and the hub are read: a wrong -out is known now
    loaded = load(file, cached=True)
    orchestrator = _ctx(ctx, json_out).orchestrator(file)
    if out:
        the_plan, saved = orchestrator.save_plan(loaded, str(Path(file).resolve()), rehash=rehash)
        write_plan(out, dataclasses.replace(saved, made_by=kimik3_identity()))
        _err.print(f"plan saved to {out}: `kimik3 apply {out}` executes exactly these steps")
    else:
        the_plan = orchestrator.plan(loaded, rehash=rehash)
    if json_out:
        click.echo(json.dumps(the_plan.to_json(), indent=2))
    else:
        render_plan(the_plan, _out, verbose=verbose or ctx.obj["verbose"])
    if detailed_exitcode and not the_plan.converged:
        sys.exit(CHANGES_PENDING)


def _apply_input(ctx: click.Context, file: str, json_out: bool):  # noqa: ANN202 - (profile, Orchestrator, runner)
    """A profile, or a saved plan (told apart by content): what apply loads, its orchestrator, and what it runs
    (None: converge in rounds; else the saved plan's steps, checked for staleness first)."""
    text = read_text(file)
    saved = read_saved_plan(text, file)
    if saved is None:
        return check_pinned(parse_text(text, file, cached=True)), _ctx(ctx, json_out).orchestrator(file), None
    check_made_by(saved, file)
    loaded = parse_text(saved.profile_text, saved.profile_source, cached=True)
    orchestrator = _ctx(ctx, json_out).orchestrator(saved.profile_source)
    # Read when it runs, under the host lock (as the observation is): what an apply that held the lock
    # before us changed in the profile file is seen, and makes the plan stale.
    return (
        loaded,
        orchestrator,
        lambda check: orchestrator.apply_saved(loaded, saved, profile_text_now(saved.profile_source), check),
    )


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "json_out", is_flag=True, help="print the result as JSON on stdout")
@click.option("--rounds", default=3, show_default=True, help="observe/plan/apply rounds before giving up")
@click.option(
    "--verify-server/--no-verify-server",
    default=True,
    show_default=True,
    help="after a change (or a launch an interrupted apply left unverified), verify the server (as `kimik3 verify`)",
)
@click.option("--verify", "rehash", is_flag=True, help=_REHASH_HELP)
@lock_timeout
@verbose_here
@click.pass_context
@_run
def apply(
    ctx: click.Context, file: str, json_out: bool, rounds: int, verify_server: bool, rehash: bool, lock_timeout: float
) -> None:
    """Converge the host: download, build, smoke-test, launch, wait healthy, verify.

    FILE is a profile, or a plan saved by `kimik3 plan FILE -out PLAN` (told apart by content): that plan's
    steps run exactly, after a fresh observation shows nothing moved since (else exit 7, nothing touched)."""
    from kimik3_reconciler.verify import verify as run_verify

    loaded, orchestrator, run = _apply_input(ctx, file, json_out)
    reports = []

    def check() -> None:
        report = run_verify(orchestrator, loaded)
        reports.append(report)
        if not json_out:
            _print_report(report)
        if not report.ok:
            raise VerifyFailed(report.failure_text())

    # Verify only what changed: on a converged host a 2.8T model would answer 4 requests for nothing.
    # A failing gate, load or verify relaunches the last good profile (orchestrator.apply_or_revert).
    with orchestrator.locked("apply", loaded.profile, lock_timeout):
        result = orchestrator.apply_or_revert(
            loaded, check if verify_server else None, max_rounds=rounds, rehash=rehash, run=run
        )
    report = reports[-1] if reports else None
    if json_out:
        click.echo(
            json.dumps(
                {
                    "profile": loaded.profile.name,
                    "changed": result.changed,
                    "rounds": result.rounds,
                    "executed": [s.to_json() for s in result.executed],
                    "final": result.final.to_json() if result.final else None,
                    "verify": report.to_json() if report else None,
                },
                indent=2,
            )
        )
    else:
        done = "no changes (converged)" if not result.changed else f"converged after {len(result.executed)} step(s)"
        if result.changed and all(s.kind == "verify" for s in result.executed):  # planning/verify_step.py
            done = "verified the launch an interrupted apply left unverified"
        _out.print(f"{loaded.profile.name}: {done}")


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "json_out", is_flag=True, help="print the observed state as JSON on stdout")
@click.option(
    "--watch", is_flag=True, help="a live view of the exporter's numbers (VRAM, queue, tok/s, load); Ctrl-C ends"
)
@click.option("--interval", type=Duration(minimum=0.5), default="2s", show_default=True, help="--watch refresh")
@click.option("--iterations", type=int, default=0, hidden=True, help="--watch: stop after N refreshes (tests)")
@click.pass_context
@_run
def status(ctx: click.Context, file: str, json_out: bool, watch: bool, interval: float, iterations: int) -> None:
    """Show what is observed for this profile (container, health, image, model)."""
    if watch and json_out:  # --watch redraws a table for a person: it would be the only thing on a JSON stdout
        raise click.UsageError(
            "--watch is a live table; --json prints the observation once (run it in a loop, or "
            "scrape the exporter's /metrics)"
        )
    loaded = load(file, cached=True)
    orchestrator = _ctx(ctx, json_out).orchestrator(file)
    observed = orchestrator.observe(loaded, stat_only=True)  # status reads, never hashes (a 50 GB shard: minutes)
    if watch:
        _watch(orchestrator, loaded, observed, interval, iterations)
        return
    holder, locked = orchestrator.ports.lock.holder() if orchestrator.ports.lock else (None, False)
    if json_out:
        click.echo(json.dumps(status_document(observed, holder, locked), indent=2))
        return
    render_status(loaded.profile, observed, holder, locked, _out)


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "json_out", is_flag=True, help="print the checks as JSON on stdout")
@click.pass_context
@_run
def verify(ctx: click.Context, file: str, json_out: bool) -> None:
    """Check the running server: health, models, text, tool call, vision, two turns (exit 1 if one fails).

    On random weights (kimik3's tiny demo/smoke models) what the model says is "not checkable", not "ok"."""
    from kimik3_reconciler.verify import verify as verify_server

    loaded = load(file, cached=True)
    report = verify_server(_ctx(ctx, json_out).orchestrator(file), loaded)
    if json_out:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        _print_report(report)
    if not report.ok:
        sys.exit(1)


@main.command()
@click.argument("file", required=False, type=click.Path(dir_okay=False))
@click.option(
    "--host-facts",
    "host_file",
    type=click.Path(dir_okay=False),
    metavar="HOST",
    help="judge a described host (YAML: gpus [{name, count, memory_gib}], ram_gib, driver) instead of this one",
)
@click.option("--json", "json_out", is_flag=True, help="print the routes as JSON on stdout")
@_run
def routes(file: str | None, host_file: str | None, json_out: bool) -> None:
    """Which ways of serving Kimi-K3 this host can take (GGUF quants on llama.cpp all-VRAM, hybrid or CPU; the
    native checkpoint on vLLM or SGLang), each judged by the plan's host gate, and why not the others; the first line
    names one to start with. With FILE, each route is that profile with the route's quant or engine, its own marked.

    Reads the host (NVML, /proc/meminfo) or HOST; changes nothing, asks no hub (exit 0 whatever is feasible)."""
    from kimik3_reconciler.planning.routes import profile_routes

    loaded = load(file, cached=True, pinned=False) if file else None  # routes judge GPUs and sizes, not pins
    if host_file:
        import yaml

        from kimik3_reconciler.model.described_host import described_host

        try:
            data = yaml.safe_load(read_text(host_file))
        except yaml.YAMLError as exc:
            raise InputError(f"{host_file}: not YAML: {exc}") from None
        host, source = described_host(data, host_file), host_file
    else:
        from kimik3_reconciler.adapters.host_linux import LinuxHost
        from kimik3_reconciler.observe.host import collect_host

        host, source = collect_host(LinuxHost()), "observed"
    report = profile_routes(loaded.profile if loaded else None, host, source)
    if json_out:
        click.echo(json.dumps(report.to_json(), indent=2))
        return
    for line in report.lines():
        style = "green" if line.startswith("yes") else "dim" if line.startswith(("no ", "note")) else "bold"
        _out.print(Text(line, style=style))


def _print_report(report) -> None:  # noqa: ANN001 - verify.VerifyReport, imported lazily
    from rich.table import Table
    from rich.text import Text as RichText

    styles = {
        "ok": ("ok", "green"),
        "failed": ("FAIL", "red"),
        "not checkable": ("not checkable", "yellow"),
        "inconclusive": ("inconclusive", "yellow"),
        "skipped": ("skipped", "dim"),
    }
    table = Table("check", "result", "seconds", "detail", title=f"verify {report.profile}")
    for check in report.checks:  # Text cells: server output is never parsed as markup
        table.add_row(check.name, RichText(*styles[check.status.value]), f"{check.seconds:.2f}", RichText(check.detail))
    _out.print(table)
    if report.weights:
        _out.print(Text(f"weights: {'random' if report.weights.random else 'real'} ({report.weights.source})"))
    counts = report.tool_calls
    _out.print(
        Text(
            f"tool calls: {counts.attempts} request(s), {counts.parse_failures} parse failure(s), "
            f"{counts.retries} retr{'y' if counts.retries == 1 else 'ies'}"
        )
    )
    if report.crash:
        _out.print(Text(f"the server crashed: {report.crash}", style="red"))
    _out.print(Text(f"verify: {report.summary()}", style="green" if report.ok else "red"))


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--images", is_flag=True, help="also remove the profile's image")
@click.option(
    "--model", is_flag=True, help="also remove the cached model files of this quant and the RPC workers' tensor caches"
)
@click.option("--slots", is_flag=True, help="also remove the saved slots (serve.slot_save's volume: users' KV cache)")
@click.option("--dry-run", is_flag=True, help="only show what would be removed")
@click.option("--json", "json_out", is_flag=True, help="print the teardown's steps as JSON on stdout")
@lock_timeout
@click.pass_context
@_run
def destroy(
    ctx: click.Context,
    file: str,
    images: bool,
    model: bool,
    slots: bool,
    dry_run: bool,
    json_out: bool,
    lock_timeout: float,
) -> None:
    """Remove what the profile created (model cache, images and saved slots only when asked)."""
    loaded = load(file, cached=True)
    orchestrator = _ctx(ctx, json_out).orchestrator(file)
    with nullcontext() if dry_run else orchestrator.locked("destroy", loaded.profile, lock_timeout):
        teardown = orchestrator.destroy(loaded, images=images, model=model, slots=slots, execute_steps=not dry_run)
    _show_steps(teardown, json_out, dry_run)


def _show_steps(the_plan, json_out: bool, dry_run: bool) -> None:  # noqa: ANN001 - model.plan.Plan
    """destroy and prune: the steps (run, or only shown with --dry-run) as a plan, or as JSON."""
    if json_out:
        click.echo(json.dumps({**the_plan.to_json(), "dry_run": dry_run}, indent=2))
    else:
        render_plan(the_plan, _out, verbose=True)


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--dry-run", is_flag=True, help="only show what would be removed")
@click.option("--json", "json_out", is_flag=True, help="print the removals as JSON on stdout")
@lock_timeout
@click.pass_context
@_run
def prune(ctx: click.Context, file: str, dry_run: bool, json_out: bool, lock_timeout: float) -> None:
    """Remove the profile's older images (kept as rollback targets until now)."""
    loaded = load(file, cached=True)
    orchestrator = _ctx(ctx, json_out).orchestrator(file)
    with nullcontext() if dry_run else orchestrator.locked("prune", loaded.profile, lock_timeout):
        pruning = orchestrator.prune(loaded, execute_steps=not dry_run)
    _show_steps(pruning, json_out, dry_run)


@main.command(name="force-unlock")
@click.argument("lock_id")
@click.argument("file", required=False, type=click.Path(dir_okay=False))
@click.pass_context
@_run
def force_unlock(ctx: click.Context, lock_id: str, file: str | None) -> None:
    """Remove the lock LOCK_ID (named in exit 5's message) left by a hung kimik3: on this host, and on the RPC
    worker and cluster node hosts of FILE's profile (without FILE: the recorded ones of the profile this host's lock
    names)."""
    # An unpinned profile is taken: the lock needs its name, RPC workers and nodes only, never the hub (a hung run's lock
    # must be removable offline).
    profile = load(file, pinned=False).profile if file else None
    _out.print(_ctx(ctx, False).orchestrator(file or ".").force_unlock(lock_id, profile))


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--interval", type=Duration(minimum=1.0), default="3m", show_default=True, help="time between passes")
@click.option("--jitter", is_flag=True, help="add a random 0-10% to each wait (hosts on one schedule spread out)")
@click.option("--once", is_flag=True, help="run one pass and exit with its code (tests, cron)")
@click.option(
    "--verify-server/--no-verify-server",
    default=True,
    show_default=True,
    help="after a change, verify the server (as apply does); a converged pass never does",
)
@verbose_here
@click.pass_context
@_run
def reconcile(ctx: click.Context, file: str, interval: float, jitter: bool, once: bool, verify_server: bool) -> None:
    """Keep the host converged to FILE: a pass every interval (plan; apply when it has changes), one JSON
    line per pass on stdout; SIGTERM/SIGINT stop it (exit 0)."""
    from kimik3_reconciler.console import reader_gone
    from kimik3_reconciler.reconcile import ReconcileLoop, Stopped, run_until_stopped

    unread: list[bool] = []

    def emit(line: dict) -> None:
        click.echo(json.dumps(line))
        sys.stdout.flush()
        if reader_gone() and not once and not unread:  # `reconcile | head -1`: nobody reads the passes, so it ends
            unread.append(True)  # once: the loop's own "stopped" line comes after, into the same closed pipe
            raise Stopped("stdout closed")

    loop = ReconcileLoop(
        file,
        _ctx(ctx, True).orchestrator(file),
        lambda path: load(path, cached=True),
        emit,
        interval,
        jitter,
        verify_server,
    )
    sys.exit(loop.run_pass()["exit_code"] if once else run_until_stopped(loop))


@main.command()
@click.argument("rule", required=False)
@click.option("--json", "json_out", is_flag=True, help="print the rule (or every rule) as JSON on stdout")
@_run
def explain(rule: str | None, json_out: bool) -> None:
    """Print a rule kimik3 enforces, why it exists and where it comes from (no RULE: list them).

    `from:` names the passage of kimik3's sources it comes from (docs/sources.md says what each source is and the
    short names rules give them)."""
    import difflib

    from kimik3_reconciler.model.rulebook import BY_ID, RULES

    def as_json(r) -> dict:  # noqa: ANN001 - model.rulebook.Rule
        return {
            "id": r.id,
            "kind": r.kind,
            "statement": r.statement,
            "reason": r.reason,
            "seed": r.seed,
            "enforced_by": list(r.enforced_by),
            "cases": [f"tests/{c}" for c in r.cases],
        }

    if rule is not None and rule not in BY_ID:
        near = difflib.get_close_matches(rule, BY_ID, n=1)
        raise InputError(
            f"unknown rule {rule!r}"
            + (f" (did you mean {near[0]!r}?)" if near else "")
            + ": `kimik3 explain` lists them"
        )
    if json_out:
        click.echo(json.dumps([as_json(r) for r in RULES] if rule is None else as_json(BY_ID[rule]), indent=2))
        return
    if rule is None:
        for r in RULES:
            _out.print(f"{r.id:<24} {r.kind:<7} {r.statement}\n{'':<33}from: {r.seed}")
        return
    r = BY_ID[rule]
    enforced = ", ".join(r.enforced_by) or "nothing yet (an open gap)"
    _out.print(f"{r.id} ({r.kind}): {r.statement}\n  why: {r.reason}\n  from: {r.seed}\n  enforced by: {enforced}")
    for case in r.cases:
        _out.print(f"  tested by: tests/{case}")


@main.command()
def schema() -> None:
    """Print the profile's JSON Schema (docs/profile.schema.json is this output)."""
    from kimik3_reconciler.model.profile_schema import profile_json_schema

    click.echo(json.dumps(profile_json_schema(), indent=2))


def _watch(orchestrator: Orchestrator, loaded, observed, interval: float, iterations: int) -> None:  # noqa: ANN001
    """`status --watch`: the exporter's numbers (exporter/watch.py reads them every `interval`) in a live table."""
    from rich.live import Live
    from rich.table import Table

    from kimik3_reconciler.console import reader_gone
    from kimik3_reconciler.exporter.watch import readings, watch_source

    source = watch_source(orchestrator.ports, loaded.profile, observed)

    def table(rows) -> Table:  # noqa: ANN001 - list[exporter.watch.Row]
        view = Table(title=source.title, title_justify="left")
        for column in ("", "", ""):
            view.add_column(column)
        for row in rows:
            view.add_row(row.section, row.name, row.value)
        return view

    rows = readings(source.read, interval, iterations, series=source.series)
    with Live(table(next(rows)), console=_out.rich, auto_refresh=False) as live:
        try:
            for reading in rows:
                live.update(table(reading), refresh=True)
                if reader_gone():  # `status --watch | head`: the view has no reader left, so it ends (exit 0)
                    break
        except KeyboardInterrupt:  # Ctrl-C ends the view, not the command: exit 0 with the last table shown
            pass


@main.command(name="metrics-serve", hidden=True)
@click.argument("name")
@click.pass_context
@_run
def metrics_serve(ctx: click.Context, name: str) -> None:
    """Run the metrics exporter of profile NAME (started by apply: `metrics:` in the profile)."""
    from kimik3_reconciler.adapters import real_ports
    from kimik3_reconciler.adapters.docker_engine import DockerEngine
    from kimik3_reconciler.adapters.latency_proxy import proxy_app
    from kimik3_reconciler.adapters.log_cap import cap_own_log
    from kimik3_reconciler.adapters.metrics_http import exporter_app, serve
    from kimik3_reconciler.adapters.socket_handover import handover_name
    from kimik3_reconciler.exporter.registry import exporter_registry
    from kimik3_reconciler.exporter.sources import SOURCE_DEADLINE_S
    from kimik3_reconciler.model.metrics import ExporterConfig
    from kimik3_reconciler.model.profile_schema import PROFILE_NAME
    from kimik3_reconciler.model.records import exporter_config_key

    if not re.fullmatch(PROFILE_NAME, name):
        # NAME becomes a state-directory path (metrics/NAME/config.json): only a profile name, never '../..'.
        raise InputError(
            f"{name!r} is not a profile name ({PROFILE_NAME}): kimik3 metrics-serve NAME takes the profile's `name`"
        )
    c = _ctx(ctx, False)
    cap_own_log()  # started detached by apply: its log file is bounded (under systemd: none, the journal's)
    configure_logging(json_logs=True, verbose=c.verbose)
    ports = real_ports(c.state_dir, c.docker_host, c.systemd_root, c.systemctl_prefix)
    # A scrape answers within its own bound (exporter/sources.py): Docker without the 90 s restart window an apply
    # rides out, each call given the docker source's deadline; the next scrape asks again.
    ports.docker = DockerEngine(c.docker_host, rides_out_restarts=False, timeout_s=SOURCE_DEADLINE_S["docker"])
    record = ports.state.read(exporter_config_key(name))
    if record is None:
        raise InputError(f"no exporter configuration for profile {name!r} in {c.state_dir} (kimik3 apply writes it)")
    config = ExporterConfig.from_json(record)
    registry, proxy = exporter_registry(config, ports)
    sites = [(exporter_app(config, registry), config.bind, config.port)]
    if proxy is not None and config.proxy_bind and config.proxy_port:
        sites.append((proxy_app(config.server_url, proxy), config.proxy_bind, config.proxy_port))
    # Its ports are taken from the exporter it replaces and offered to the next one: a replacement never closes them.
    serve(sites, handover=handover_name(c.state_dir, "metrics-serve", name))


@main.command(name="front-serve", hidden=True)
@click.argument("name")
@click.pass_context
@_run
def front_serve(ctx: click.Context, name: str) -> None:
    """Run the front of profile NAME: its proxy on serve.port, holding requests while apply replaces the server
    (started by apply: `metrics.handover` in the profile)."""
    from prometheus_client.registry import CollectorRegistry

    from kimik3_reconciler.adapters import real_ports
    from kimik3_reconciler.adapters.front_proxy import front_app
    from kimik3_reconciler.adapters.log_cap import cap_own_log
    from kimik3_reconciler.adapters.metrics_http import serve
    from kimik3_reconciler.adapters.socket_handover import handover_name
    from kimik3_reconciler.exporter.proxy_observe import ProxyMetrics
    from kimik3_reconciler.model.front import FrontConfig
    from kimik3_reconciler.model.profile_schema import PROFILE_NAME
    from kimik3_reconciler.model.records import front_config_key, front_token_key

    if not re.fullmatch(PROFILE_NAME, name):
        # NAME becomes a state-directory path (front/NAME/config.json): only a profile name, never '../..'.
        raise InputError(
            f"{name!r} is not a profile name ({PROFILE_NAME}): kimik3 front-serve NAME takes the profile's `name`"
        )
    c = _ctx(ctx, False)
    cap_own_log()
    configure_logging(json_logs=True, verbose=c.verbose)
    ports = real_ports(c.state_dir, c.docker_host, c.systemd_root, c.systemctl_prefix)
    record, token = ports.state.read(front_config_key(name)), ports.state.read(front_token_key(name))
    if record is None or not token or not token.get("token"):
        raise InputError(
            f"no front configuration or token for profile {name!r} in {c.state_dir} (kimik3 apply writes them)"
        )
    config = FrontConfig.from_json(record)
    registry = CollectorRegistry(auto_describe=False)
    # Labelled with the profile only: the front outlives every server fingerprint behind it.
    metrics = ProxyMetrics(registry, {"profile": config.profile})
    serve(
        [(front_app(config, str(token["token"]), registry, metrics), config.bind, config.port)],
        handover=handover_name(c.state_dir, "front-serve", name),
    )


main.add_command(destroy, name="down")
