"""Plan a helper process (the exporter, the front: model/helpers.py) run detached: started when absent, replaced
when its fingerprint moves or it stops answering (handing its listening sockets to its replacement where it can),
stopped on destroy; and what its clients see while it is replaced."""

from __future__ import annotations

from kimik3_reconciler.model.facts import ExporterFact
from kimik3_reconciler.model.front import FrontConfig
from kimik3_reconciler.model.helpers import Helper
from kimik3_reconciler.model.metrics import ExporterConfig
from kimik3_reconciler.model.plan import Action, Step


def hands_over(running: ExporterFact | None) -> bool:
    """The running helper (exporter, front) offers its listening sockets to its replacement and answers: the new
    one starts beside it and takes them (steps/helper.py replace_detached)."""
    return (
        running is not None
        and running.alive
        and running.unit is None
        and running.hands_over_sockets
        and running.serving is not None
    )


def swap_cost(running: ExporterFact | None, ports: str) -> str | None:
    """What clients of a helper's ports see while it is replaced (issue 38 item 2)."""
    if running is None or not running.alive:
        return None
    if hands_over(running):
        return f"{ports} stay open: the new process takes the listening sockets, the old one finishes what it holds"
    # A helper an older kimik3 started (or one that does not answer) cannot hand its sockets over: it is stopped
    # before its replacement binds them; measured by bench/helper_swap.py.
    return (
        f"{ports} refuse connections for about a second (the running process "
        f"{'does not answer' if running.serving is None else 'predates the socket handover'}: stopped, then "
        "its replacement started)"
    )


def plan_detached(
    helper: Helper,
    wanted: ExporterConfig | FrontConfig,
    running: ExporterFact | None,
    target: str,
    *,
    swap_ports: str,
    started: str,
    unanswered: str,
    steady: str,
) -> tuple[Step, ...]:
    """The helper's step: start it (`started`: what the reason adds), replace it (its clients see `swap_ports`
    stay open or close), or nothing (`steady`: what the reason says it does); `unanswered`: what does not answer."""
    what, pid = helper.what, running.pid if running is not None else 0
    run = helper.run(
        profile=wanted.profile,
        config=wanted.to_json(),
        fingerprint=wanted.fingerprint,
        health_url=wanted.health_url,
        replace_pid=pid if running is not None and running.alive else None,
        hand_over=hands_over(running),
    )
    if running is None or not running.alive:
        why = f"no {what}" if running is None else f"{what} (pid {pid}) is not running"
        return (Step(helper.step, target, Action.CREATE, f"{why}: start it{started}", spec=run),)
    swap = swap_cost(running, swap_ports)
    if running.fingerprint != wanted.fingerprint:
        return (
            Step(
                helper.step,
                target,
                Action.REPLACE,
                f"{what} fingerprint {running.fingerprint} → {wanted.fingerprint}",
                diff=helper.config_diff(running.config, wanted.to_json()),
                spec=run,
                cost=swap,
            ),
        )
    if running.serving != wanted.fingerprint:
        why = f"{what} (pid {pid}) runs but {unanswered} its fingerprint: restart it"
        return (Step(helper.step, target, Action.REPLACE, why, spec=run, cost=swap),)
    return (Step(helper.step, target, Action.NOOP, f"{what} pid {pid} {steady}", spec=run),)


def plan_helper_teardown(helper: Helper, name: str, running: ExporterFact | None) -> tuple[Step, ...]:
    """destroy: stop the helper (the exporter's scrape of a removed container would only log errors; the front
    would answer 502 for a server that is gone)."""
    if running is None:
        return ()
    what = helper.what
    return (
        Step(
            helper.step,
            name,
            Action.DELETE,
            f"stop the {what}" if running.alive else f"remove the record of a stopped {what}",
            spec=helper.stop(name, running.pid if running.alive else 0),
        ),
    )
