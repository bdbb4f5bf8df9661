"""The fleet's router on the controller (fleet/router_layout.py: what runs where): `ensure_router` (run by `fleet
apply`) converges it: smg, and kimik3's router in front of it where the policy is `slots`, each started supervised
(adapters/router_keep.py: a systemd unit, else under `kimik3 fleet keep`) when nothing answers on its port; a router a
previous `fleet apply` started in another layout (the policy changed, or smg alone on the clients' port from before
kimik3 had a router) or under another supervisor is stopped and replaced; the hosts that serve are registered with
smg. The record `<state>/fleet/<name>/router.json` keeps the pids (units), the supervisor and the layout.

`router_now` says what answers (`fleet plan`, `fleet status`), `router_problem` what `fleet status` fails on; the
hidden `kimik3 fleet route` runs kimik3's
router (adapters/slot_router.py) in the foreground, as `ensure_router` starts it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from kimik3_reconciler.cli import _err, _run
from kimik3_reconciler.errors import PlanError

PROXY_START_S = 30.0  # how long kimik3's router has to answer after it was started


def record_path(state_dir: Path, fleet_name: str) -> Path:
    return state_dir / "fleet" / fleet_name / "router.json"


def _read(path: Path) -> dict:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def recorded_layout(record: dict, layout) -> dict | None:  # noqa: ANN001 - fleet.router_layout.RouterLayout
    """The layout the record says was started (None: no record). A record from before kimik3 had a router holds smg
    alone on its url, its policy unsaid: taken as `layout`'s where that is smg alone there too (a policy change did not
    restart smg then either)."""
    if not record:
        return None
    if "layout" in record:
        return record["layout"]
    legacy = {"url": record.get("url"), "smg_url": record.get("url"), "proxy": False}
    same = not layout.proxy and legacy["url"] == layout.url
    return {**legacy, "policy": layout.policy if same else "an smg policy (from before kimik3's router)"}


def proxy_answers(url: str) -> bool:
    """kimik3's router answers on `url` (its own healthz, which smg and a server do not serve)."""
    import httpx

    from kimik3_reconciler.adapters.slot_router import CONTROL_PREFIX

    try:
        answer = httpx.get(f"{url}{CONTROL_PREFIX}/healthz", timeout=3)
    except httpx.HTTPError:
        return False
    try:
        return answer.status_code == 200 and answer.json().get("router") == "kimik3"
    except ValueError:  # something else on the port, answering 200 with another body
        return False


def router_now(layout) -> str:  # noqa: ANN001 - fleet.router_layout.RouterLayout
    """What answers on the fleet's router address now: 'kimik3 router', 'smg', 'another process' (the port held, by
    neither: `fleet apply` refuses to start beside it), or 'nothing'."""
    from kimik3_reconciler.adapters.router_smg import SmgRouter

    if proxy_answers(layout.url):
        return "kimik3 router"
    router = SmgRouter(layout.url, timeout_s=3)
    try:
        if router.answers():
            return "smg"
    finally:
        router.close()
    return "another process" if port_taken(layout.bind, layout.port) else "nothing"


def router_problem(layout, now: str, started: bool = True) -> str | None:  # noqa: ANN001 - router_layout.RouterLayout
    """What is wrong with the router as it runs (`fleet status` fails on it), `now` being `router_now(layout)`: the
    clients' port not answered as the layout wants (its process killed), or smg behind kimik3's router silent (the
    rotation no longer read, every other path failing). None when both answer, and when nothing answers where no
    `fleet apply` started a router (`started`: its record exists): a fleet not rolled out yet, not a router that died."""
    from kimik3_reconciler.adapters.router_smg import SmgRouter

    if now == "nothing" and not started:
        return None
    wanted = "kimik3 router" if layout.proxy else "smg"
    if now == "another process":
        return f"another process holds {layout.url} ({wanted} wanted): stop it, then `fleet apply` starts the router"
    if now != wanted:
        return f"{now} answers on {layout.url}, {wanted} wanted: `fleet apply` starts it"
    if layout.proxy:
        behind = SmgRouter(layout.smg_url, timeout_s=3)
        try:
            if not behind.answers():
                return (
                    f"smg behind kimik3's router does not answer on {layout.smg_url} (the rotation is not read): "
                    "`fleet apply` starts it"
                )
        finally:
            behind.close()
    return None


def router_change(fleet, state_dir: Path) -> dict:  # noqa: ANN001 - fleet.Fleet
    """The router as the fleet file wants it, what answers now, and what `fleet apply` changes (for `fleet plan`)."""
    from kimik3_reconciler.adapters.router_keep import describe, supervisor
    from kimik3_reconciler.fleet.router_layout import router_layout

    layout = router_layout(fleet.router)
    now = router_now(layout)
    record = _read(record_path(state_dir, fleet.name))
    was = recorded_layout(record, layout)
    wanted = "kimik3 router" if layout.proxy else "smg"
    keeper = supervisor()
    if now == "nothing":
        change = f"starts {layout.describe()}; {describe(keeper)}"
    elif was is not None and was != layout.record():
        change = f"replaces {now} (policy {was.get('policy')}) on {layout.url} with {layout.describe()}"
    elif was is not None and _supervisor(record) != keeper:
        change = f"restarts {now} on {layout.url} supervised ({_supervisor(record)} before): {describe(keeper)}"
    elif now != wanted:
        change = (
            f"{now} answers on {layout.url}, not started by kimik3 for this fleet: left as it is, and `fleet apply` "
            f"refuses to start the router beside it ({wanted} wanted: stop it, then `fleet apply` starts the router)"
        )
    else:
        change = None
    return {"wanted": layout.describe(), "supervisor": keeper, "now": now, "change": change}


def recorded_supervisor(state_dir: Path, fleet_name: str) -> str | None:
    """Who keeps the router `fleet apply` started running (`fleet status`): systemd, keeper, none (an earlier
    release's); None where no `fleet apply` started one."""
    record = _read(record_path(state_dir, fleet_name))
    return _supervisor(record) if record else None


def _supervisor(record: dict) -> str:
    """Who keeps the recorded processes running: 'none' in a record from before kimik3 supervised its router."""
    return record.get("supervisor", "none")


def ensure_router(fleet, state_dir: Path, worker_urls: dict[str, str], serves) -> None:  # noqa: ANN001
    """The fleet's router converged to its layout, every serving host (name -> url; `serves(url)`) in smg."""
    from kimik3_reconciler.adapters.router_keep import supervisor
    from kimik3_reconciler.adapters.router_smg import RouterError, SmgRouter, start_smg
    from kimik3_reconciler.fleet.router_layout import router_layout

    layout = router_layout(fleet.router)
    path = record_path(state_dir, fleet.name)
    record = _read(path)
    was = recorded_layout(record, layout)
    keeper = supervisor()
    if was is not None and was != layout.record():
        _stop_recorded(record)
        _err.print(f"router: the one started for policy {was.get('policy')} stopped; now {layout.describe()}")
        record = {}
    elif was is not None and _supervisor(record) != keeper:
        # Started unsupervised (an earlier release) or under the other supervisor (run as another user): as it runs,
        # nothing would start it again, so it is replaced by processes this controller keeps.
        _stop_recorded(record)
        _err.print(f"router: the one started with supervisor {_supervisor(record)} stopped; now {keeper}")
        record = {}
    router = SmgRouter(layout.smg_url, layout.smg_metrics_url)
    try:
        smg_down, proxy_down = not router.answers(), layout.proxy and not proxy_answers(layout.url)
        # Before anything starts: a port another process holds (an smg or anything not started by a `fleet apply`
        # for this fleet, so not in its record) would fail the start after the other process was started, which
        # would then run unrecorded (no `fleet apply` stops it). `fleet plan` says it is left as it is.
        # A recorded one that is down (exited, its supervisor about to start it again) is stopped first: started
        # beside it, a second one would lose the port to it, or run unrecorded.
        for down, key in ((smg_down, "pid"), (proxy_down, "proxy_pid")):
            if down:
                _stop_one(record, key)
        for down, bind, port, what in (
            (smg_down, layout.smg_bind, layout.smg_port, "smg"),
            (proxy_down, layout.bind, layout.port, "kimik3 router"),
        ):
            if down and port_taken(bind, port):
                raise PlanError(
                    f"router: port {port} on {bind} ({what}'s, for {layout.describe()}) is held by a process "
                    f"that does not answer as {what} and that no `fleet apply` of fleet {fleet.name} recorded "
                    f"({router_now(layout)} on {layout.url}): stop it or change router.port; nothing was started",
                    (("router", "port"),),
                )
        record["supervisor"] = keeper
        if smg_down:
            log = path.parent / "router.log"
            start, unit = _start(keeper, record, "pid", fleet.name)
            running = start_smg(
                layout.smg_bind,
                layout.smg_port,
                layout.smg_metrics_port,
                layout.smg_policy,
                log,
                metrics_host=layout.bind,
                start=start,
            )
            record.update(pid=running.pid, url=running.url, metrics_url=running.metrics_url)
            _write(path, record)  # recorded at once: a router that then fails to start leaves no smg unrecorded
            _err.print(f"router: smg started on {running.url} (pid {running.pid}{unit})", highlight=False)
        if proxy_down:
            start, unit = _start(keeper, record, "proxy_pid", fleet.name)
            record["proxy_pid"] = start_proxy(layout, path.parent / "route.log", start)
            _err.print(
                f"router: kimik3 router started on {layout.url} (pid {record['proxy_pid']}{unit})", highlight=False
            )
        record["layout"] = layout.record()
        _write(path, record)
        listed = {w.url for w in router.workers()}
        for name, url in worker_urls.items():
            # One smg lists is left to its own health checks; one not serving yet is added by its `router: in`.
            if url in listed or not serves(url):
                continue
            try:
                router.add(url)
            except RouterError as exc:
                # kimik3's router registers again what a restarted smg lost (adapters/slot_router.py): the same url
                # added by both at once is answered 409, being added already.
                if "HTTP 409" not in str(exc):
                    raise
            _err.print(f"router: {name} ({url}) added", highlight=False)
    finally:
        router.close()


def port_taken(host: str, port: int) -> bool:
    """Something accepts TCP connections on `host`:`port` (an address to bind on: 0.0.0.0 and :: are reached on
    loopback)."""
    import socket

    address = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    try:
        with socket.create_connection((address, port), timeout=2):
            return True
    except OSError:
        return False


def _write(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True))
    tmp.replace(path)


UNIT_ROLES = {"pid": "smg", "proxy_pid": "router"}  # the record's pid key -> the unit's role (router_keep.unit_name)


def _start(keeper: str, record: dict, key: str, fleet_name: str):  # noqa: ANN202 - (router_keep.Start, log words)
    """How the process the record keeps under `key` is started: as a systemd unit (named in the record's `units`) or
    under `kimik3 fleet keep`."""
    from kimik3_reconciler.adapters.router_keep import SYSTEMD, keeper_start, systemd_start, unit_name

    units = record.setdefault("units", {})
    if keeper != SYSTEMD:
        units.pop(key, None)
        return keeper_start, ", kept by `kimik3 fleet keep`"
    units[key] = unit_name(UNIT_ROLES[key], fleet_name)
    return systemd_start(units[key]), f", unit {units[key]}"


def start_proxy(layout, log: Path, start=None) -> int:  # noqa: ANN001 - RouterLayout, router_keep.Start
    """kimik3's router started by `start` (None: detached, unsupervised); its pid once it answers."""
    from kimik3_reconciler.adapters.router_smg import start_detached

    argv = [
        sys.executable,
        "-m",
        "kimik3_reconciler",
        "fleet",
        "route",
        "--host",
        layout.bind,
        "--port",
        str(layout.port),
        "--smg",
        layout.smg_url,
        "--smg-metrics",
        layout.smg_metrics_url,
    ]
    return (start or start_detached)(argv, log, lambda: proxy_answers(layout.url), PROXY_START_S)


# What a recorded pid's command line holds when it still runs what was started (smg renames itself `smg::router`).
# A recorded pid may have been reused since by anything, a `kimik3 fleet apply` or another kimik3 command included:
# "kimik3" alone in it is not enough to be sent SIGTERM.
RECORDED = {"proxy_pid": b"kimik3_reconciler\0fleet\0route\0", "pid": b"smg"}
# A keeper's pid (router_keep.keeper_argv) runs `... kimik3_reconciler fleet keep -- ARGV`: both must be in its
# command line ("smg" alone matches far more than a keeper of smg once the pid is reused).
KEEPER_MARKER = b"kimik3_reconciler\0fleet\0keep\0--\0"


def _ours(pid: int, marker: bytes) -> bool:
    """The pid runs what the record started (`marker` in its command line)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return marker in command


def _stop_one(record: dict, key: str) -> None:
    """The process the record keeps under `key` stopped: its systemd unit, or its pid (the keeper's, which stops its
    child) where that still runs what was started."""
    from kimik3_reconciler.adapters.router_keep import stop_unit
    from kimik3_reconciler.adapters.router_smg import stop_pid

    unit = (record.get("units") or {}).get(key)
    if isinstance(unit, str) and unit.startswith("kimik3-"):  # only a unit kimik3 named (router_keep.unit_name)
        stop_unit(unit)
        return
    from kimik3_reconciler.adapters.router_keep import KEEPER

    pid = record.get(key)
    kept = _supervisor(record) == KEEPER
    if isinstance(pid, int) and _ours(pid, RECORDED[key]) and (not kept or _ours(pid, KEEPER_MARKER)):
        stop_pid(pid)


def _stop_recorded(record: dict) -> None:
    """The processes a record names stopped (kimik3's router first: no client request finds smg gone behind it)."""
    for key in RECORDED:
        _stop_one(record, key)


def stop_router(state_dir: Path, fleet_name: str) -> None:
    """Everything `ensure_router` started for the fleet stopped, its record removed."""
    path = record_path(state_dir, fleet_name)
    _stop_recorded(_read(path))
    path.unlink(missing_ok=True)


@click.command(name="keep", hidden=True, context_settings={"ignore_unknown_options": True})
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
def keep_cmd(argv: tuple[str, ...]) -> None:
    """Run ARGV and start it again whenever it exits (adapters/router_keep.py), until SIGTERM: how `fleet apply` keeps
    smg and kimik3's router running where there is no systemd."""
    from kimik3_reconciler.adapters.router_keep import keep

    sys.exit(keep(list(argv), lambda line: print(line, flush=True)))


@click.command(name="route", hidden=True)
@click.option("--host", required=True, help="the address to listen on (the fleet's router.host)")
@click.option("--port", required=True, type=int, help="the clients' port (router.port)")
@click.option("--smg", "smg_url", required=True, help="smg's HTTP address (its worker list; the other paths)")
@click.option("--smg-metrics", "smg_metrics_url", default=None, help="smg's Prometheus listener (its breakers)")
@_run
def route_cmd(host: str, port: int, smg_url: str, smg_metrics_url: str | None) -> None:
    """kimik3's router: chat requests to the replica the servers say holds the conversation (the slots policy)."""
    from kimik3_reconciler.adapters.slot_router import serve

    serve(host, port, smg_url, smg_metrics_url)
