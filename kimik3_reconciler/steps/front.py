"""Start and stop the front (`kimik3 front-serve <profile>`, issue 29), and tell it to hold and release clients
while an apply replaces the server behind it."""

from __future__ import annotations

import secrets

from kimik3_reconciler.model.helper_env import FRONT_READS
from kimik3_reconciler.model.records import front_config_key, front_key, front_token_key
from kimik3_reconciler.model.specs import FrontHold, FrontRun, FrontStop, FrontUnit
from kimik3_reconciler.observe.front import FRONT_COMMAND, runs_front
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.exporter import STOP_S, _processes, replace_detached, start_detached, wait_unit
from kimik3_reconciler.steps.report import Reporter
from kimik3_reconciler.steps.unit import install_unit

RELEASE_TIMEOUT_S = 10.0


def log_key(profile: str) -> str:
    return f"front/{profile}/front.log"


def _token(ports: Ports, profile: str) -> str | None:
    record = ports.state.read(front_token_key(profile))
    token = record.get("token") if record else None
    return token if isinstance(token, str) and token else None


def run_front(run: FrontRun, ports: Ports, reporter: Reporter) -> None:
    processes = _processes(ports)
    old = run.replace_pid if run.replace_pid and runs_front(processes.cmdline(run.replace_pid), run.profile) else None

    def write_inputs() -> None:
        if _token(ports, run.profile) is None:
            # Made once and kept: an apply's hold and release carry it; never in argv, the config or a plan.
            ports.state.write(front_token_key(run.profile), {"token": secrets.token_urlsafe(32)})
        ports.state.write(front_config_key(run.profile), run.config)

    def start() -> None:
        start_detached(
            run,
            ports,
            reporter,
            (FRONT_COMMAND, run.profile),
            FRONT_READS,
            front_key(run.profile),
            log_key(run.profile),
            lambda cmdline: runs_front(cmdline, run.profile),
            what="front",
            step="front",
        )

    # Without a handover (a front an older kimik3 started) the public port is closed for about a second.
    replace_detached(
        ports, reporter, old, run.hand_over, start, what="front", profile=run.profile, before_start=write_inputs
    )


def run_front_unit(run: FrontUnit, ports: Ports, reporter: Reporter) -> None:
    """The front as a systemd unit (as steps/exporter.py run_exporter_unit): the detached front stopped first (it
    holds serve.port), its token and config records (the unit's process reads them at start), the unit machinery,
    then the control /healthz."""
    if run.stop_pid and ports.processes is not None and runs_front(ports.processes.cmdline(run.stop_pid), run.profile):
        ports.processes.terminate(run.stop_pid, STOP_S)
        reporter.event("stopped", front=run.profile, pid=run.stop_pid)
    if _token(ports, run.profile) is None:
        ports.state.write(front_token_key(run.profile), {"token": secrets.token_urlsafe(32)})
    ports.state.write(front_config_key(run.profile), run.config)
    install_unit(run.install, ports, reporter)
    ports.state.write(
        front_key(run.profile),
        {
            "pid": 0,
            "unit": run.install.unit,
            "fingerprint": run.fingerprint,
            "config": run.config,
            "date": ports.clock.now().isoformat(timespec="seconds"),
        },
    )
    wait_unit(
        ports,
        reporter,
        run.install.unit,
        run.health_url,
        run.fingerprint,
        run.timeout_s,
        what="front",
        profile=run.profile,
        step="front",
    )


def stop_front(stop: FrontStop, ports: Ports, reporter: Reporter) -> None:
    processes = _processes(ports)
    if stop.pid and runs_front(processes.cmdline(stop.pid), stop.profile):
        processes.terminate(stop.pid, STOP_S)
        reporter.event("stopped", front=stop.profile, pid=stop.pid)
    ports.state.delete(front_key(stop.profile))
    ports.state.delete(front_config_key(stop.profile))
    # The control token goes with the front it controls: a front started later makes its own.
    ports.state.delete(front_token_key(stop.profile))


def hold_clients(hold: FrontHold, ports: Ports, reporter: Reporter) -> None:
    """Close the front's gate and wait out its drain. A front that does not answer is no reason to keep the old
    server running: the replacement goes on (its clients see refused connections, the next apply restarts it)."""
    token = _token(ports, hold.profile)
    if ports.front is None or token is None:
        reporter.event("front", profile=hold.profile, held=False, why="no front control wired or no token record")
        return
    status, answer = ports.front.post(
        f"{hold.control_url}/hold", token, hold.order, timeout_s=float(hold.order["drain_s"]) + RELEASE_TIMEOUT_S
    )
    if status != 200 or not isinstance(answer, dict):
        reporter.event("front", profile=hold.profile, held=False, why=f"hold answered {status}: {str(answer)[:160]}")
        return
    # In flight past the drain timeout: those requests end when the server stops (the operator chose drain_s).
    reporter.event(
        "front",
        profile=hold.profile,
        held=True,
        drained=answer.get("drained"),
        busy=answer.get("busy") or None,
        drain_s=answer.get("drain_s"),
        waiting=answer.get("held"),
    )


def release_clients(hold: FrontHold, ports: Ports, reporter: Reporter) -> None:
    """Open the front's gate again: the held requests go to whatever serves behind it now (the new server, or the
    reverted one). Never raises: an apply's own outcome is what it reports."""
    token = _token(ports, hold.profile)
    if ports.front is None or token is None:
        return
    status, answer = ports.front.post(f"{hold.control_url}/release", token, {}, timeout_s=RELEASE_TIMEOUT_S)
    if status != 200 or not isinstance(answer, dict):
        # Its lease lets go by itself (model/front.py HoldOrder.lease_s) if it is still up.
        reporter.event(
            "front", profile=hold.profile, released=False, why=f"release answered {status}: {str(answer)[:160]}"
        )
        return
    reporter.event("front", profile=hold.profile, released=answer.get("released_now"), held_s=answer.get("held_s"))
