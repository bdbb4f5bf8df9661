"""Start and stop the front (`kimik3 front-serve <profile>`, issue 29: the helper lifecycle, steps/helper.py, with
its control token), and tell it to hold and release clients while an apply replaces the server behind it."""

from __future__ import annotations

import secrets

from kimik3_reconciler.model.helpers import FRONT
from kimik3_reconciler.model.records import front_token_key
from kimik3_reconciler.model.specs import FrontHold, FrontRun, FrontStop, FrontUnit
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.helper import run_helper, run_helper_unit, stop_helper
from kimik3_reconciler.steps.report import Reporter

RELEASE_TIMEOUT_S = 10.0


def _token(ports: Ports, profile: str) -> str | None:
    record = ports.state.read(front_token_key(profile))
    token = record.get("token") if record else None
    return token if isinstance(token, str) and token else None


def _make_token(ports: Ports, profile: str) -> None:
    if _token(ports, profile) is None:
        # Made once and kept: an apply's hold and release carry it; never in argv, the config or a plan.
        ports.state.write(front_token_key(profile), {"token": secrets.token_urlsafe(32)})


def run_front(run: FrontRun, ports: Ports, reporter: Reporter) -> None:
    # Without a handover (a front an older kimik3 started) the public port is closed for about a second.
    run_helper(FRONT, run, ports, reporter, prepare=lambda: _make_token(ports, run.profile))


def run_front_unit(run: FrontUnit, ports: Ports, reporter: Reporter) -> None:
    """The front as a systemd unit, as the exporter is one: its token record too (the unit's process reads it)."""
    run_helper_unit(FRONT, run, ports, reporter, prepare=lambda: _make_token(ports, run.profile))


def stop_front(stop: FrontStop, ports: Ports, reporter: Reporter) -> None:
    stop_helper(FRONT, stop, ports, reporter)
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
