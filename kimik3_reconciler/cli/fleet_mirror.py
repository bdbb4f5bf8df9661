"""`kimik3 fleet mirror start|stop|serve` (hidden; run on each host by `fleet apply`'s playbook): the host's verified
model files served to the other hosts of its site (adapters/cache_mirror.py), for the length of a rollout.

start: the profile on stdin says which cache (`model.cache_dir`, else the HF cache) and which address (`serve.host`:
the address the router, so the site, reaches this host at); a mirror left by an earlier run is stopped first; the
server runs detached (its own session, its output in `<state>/fleet-mirror.log`) and is waited for until it
answers; `<state>/fleet-mirror.json` records its pid. It ends itself after `--lifetime` (SIGALRM): a controller
killed midway does not leave the files served for ever. stop: that pid ended (only when its command line is this
mirror's: a pid reused since is left alone)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import click

from kimik3_reconciler.cli import _run
from kimik3_reconciler.errors import StepError

DEFAULT_PORT = 8089
LIFETIME_S = 6 * 3600


def _record(state_dir: Path) -> Path:
    return state_dir / "fleet-mirror.json"


def _ours(pid: int) -> bool:
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"mirror" in words and b"serve" in words


def stop_mirror(state_dir: Path) -> int | None:
    """The pid of the mirror ended (None: none was running)."""
    record = _record(state_dir)
    try:
        pid = int(json.loads(record.read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    record.unlink(missing_ok=True)
    if not _ours(pid):
        return None
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while _ours(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return pid


def _answers(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1):
            return True
    except OSError:
        return False


@click.group(name="mirror", hidden=True)
def mirror() -> None:
    """A host's verified model files, served to its site during a rollout (run by `fleet apply`)."""


@mirror.command(name="start")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(1, 65535))
@click.option("--lifetime", default=LIFETIME_S, show_default=True, type=click.IntRange(1))
@click.pass_context
@_run
def start_cmd(ctx: click.Context, file: str, port: int, lifetime: int) -> None:
    from huggingface_hub import constants

    from kimik3_reconciler.cli.inputs import load

    profile = load(file, pinned=False).profile
    state_dir = Path(ctx.obj["state_dir"])
    state_dir.mkdir(parents=True, exist_ok=True)
    cache = str(Path(profile.model.cache_dir).resolve()) if profile.model.cache_dir else str(constants.HF_HUB_CACHE)
    address = {"loopback": "127.0.0.1"}.get(profile.serve.host, profile.serve.host)
    if address == "tailscale":  # resolved by kimik3's own launch only; the fleet reaches hosts at an address
        raise StepError("the model mirror binds serve.host: an address (or loopback), not tailscale")
    stop_mirror(state_dir)
    with open(state_dir / "fleet-mirror.log", "ab") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "kimik3_reconciler", "fleet", "mirror", "serve"]
            + ["--cache-dir", cache, "--address", address, "--port", str(port), "--lifetime", str(lifetime)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # not ended with the SSH session that started it
        )
    _record(state_dir).write_text(json.dumps({"pid": child.pid, "url": f"http://{address}:{port}", "cache": cache}))
    deadline = time.monotonic() + 30
    while not _answers(address, port):
        if child.poll() is not None or time.monotonic() > deadline:
            raise StepError(
                f"the model mirror on {address}:{port} did not start (exit {child.poll()}): "
                f"see {state_dir / 'fleet-mirror.log'}"
            )
        time.sleep(0.1)
    click.echo(f"mirror: {cache} on http://{address}:{port} (pid {child.pid}, for at most {lifetime} s)")


@mirror.command(name="stop")
@click.pass_context
@_run
def stop_cmd(ctx: click.Context) -> None:
    pid = stop_mirror(Path(ctx.obj["state_dir"]))
    click.echo(f"mirror: stopped (pid {pid})" if pid else "mirror: none running")


@mirror.command(name="serve")
@click.option("--cache-dir", required=True)
@click.option("--address", required=True)
@click.option("--port", required=True, type=int)
@click.option("--lifetime", required=True, type=int)
def serve_cmd(cache_dir: str, address: str, port: int, lifetime: int) -> None:
    from kimik3_reconciler.adapters.cache_mirror import serve

    signal.alarm(lifetime)  # SIGALRM's default action ends the process: the mirror's upper bound
    serve(Path(cache_dir), address, port)


def register(group: click.Group) -> None:
    group.add_command(mirror)
