"""A helper process's lifecycle (the metrics exporter, the front: model/helpers.py): start it detached, replace it
(handing its listening sockets over), run it as a systemd unit, stop it; its records written and removed with it."""

from __future__ import annotations

import json
from collections.abc import Callable

from kimik3_reconciler.errors import StepError
from kimik3_reconciler.model.helpers import Helper
from kimik3_reconciler.model.records import HANDS_OVER_SOCKETS
from kimik3_reconciler.model.specs import ExporterRun, ExporterStop, ExporterUnit, FrontRun, FrontStop, FrontUnit
from kimik3_reconciler.ports import Ports, ProcessPort
from kimik3_reconciler.steps.report import Reporter
from kimik3_reconciler.steps.unit import install_unit

POLL_S = 0.1
STOP_S = 10.0


def _nothing() -> None:
    return None


def _processes(ports: Ports) -> ProcessPort:
    if ports.processes is None:
        raise StepError("metrics: no process port wired (kimik3 cannot start the exporter here)")
    return ports.processes


def run_helper(
    helper: Helper,
    run: ExporterRun | FrontRun,
    ports: Ports,
    reporter: Reporter,
    prepare: Callable[[], None] = _nothing,
) -> None:
    """Start the helper detached, replacing the one at `run.replace_pid` if that pid still runs it. `prepare`, then
    its config record, are written before it starts (its process reads them)."""
    processes = _processes(ports)
    old = run.replace_pid if run.replace_pid and helper.runs(processes.cmdline(run.replace_pid), run.profile) else None

    def write_inputs() -> None:
        prepare()
        ports.state.write(helper.config_key(run.profile), run.config)

    replace_detached(
        ports,
        reporter,
        old,
        run.hand_over,
        lambda: start_detached(helper, run, ports, reporter),
        what=helper.what,
        profile=run.profile,
        before_start=write_inputs,
    )


def start_detached(helper: Helper, run: ExporterRun | FrontRun, ports: Ports, reporter: Reporter) -> None:
    """Spawn a helper (`python -m kimik3_reconciler <command> <profile>`, only its `reads` of the environment),
    record it, wait for its /healthz to answer the fingerprint."""
    log = helper.log_key(run.profile)
    pid = _processes(ports).spawn((helper.command, run.profile), log, helper.reads)
    # Recorded before the wait: a helper that comes up after a timeout is still found (and replaced).
    ports.state.write(
        helper.record_key(run.profile),
        {
            "pid": pid,
            "fingerprint": run.fingerprint,
            "config": run.config,
            "date": ports.clock.now().isoformat(timespec="seconds"),
            HANDS_OVER_SOCKETS: True,
        },
    )
    wait_detached(helper, run, ports, reporter, pid, log)


def replace_detached(
    ports: Ports,
    reporter: Reporter,
    old: int | None,
    hand_over: bool,
    start: Callable[[], None],
    *,
    what: str,
    profile: str,
    before_start: Callable[[], None],
) -> None:
    """Start a detached helper (the exporter, the front), replacing `old` (its pid, None: none runs). Without
    `hand_over` the old one is stopped first (the new one binds the same ports: they refuse clients meanwhile). With
    it the new one starts while the old one serves and takes its listening sockets (adapters/socket_handover.py):
    the ports never close; then the old one, no longer accepting, finishes what it holds and is stopped. A handover
    that does not happen (the new one exits or never answers) falls back to stop, then start."""
    processes = _processes(ports)
    if old is not None and not hand_over:
        processes.terminate(old, STOP_S)
        reporter.event("stopped", **{what: profile}, pid=old)
        old = None
    before_start()
    if old is None:
        start()
        return
    try:
        start()
    except StepError as failed:
        reporter.event(
            "warning",
            **{what: profile},
            handed_over=False,
            why=str(failed)[:300],
            consequence=f"the {what} is stopped, then started: its ports close meanwhile",
        )
        processes.terminate(old, STOP_S)
        reporter.event("stopped", **{what: profile}, pid=old)
        start()
        return
    # It stopped accepting at the handover and exits by itself once its clients moved over and what it held
    # finished: waited for (STOP_S), then stopped (a signal sooner would close kept-alive connections under them).
    deadline = ports.clock.monotonic() + STOP_S
    while processes.cmdline(old) is not None and ports.clock.monotonic() < deadline:
        ports.clock.sleep(POLL_S)
    processes.terminate(old, STOP_S)
    reporter.event("stopped", **{what: profile}, pid=old, handed_over=True)


def wait_detached(
    helper: Helper, run: ExporterRun | FrontRun, ports: Ports, reporter: Reporter, pid: int, log: str
) -> None:
    """Wait until the spawned helper answers its /healthz with its fingerprint; a process that exits first, or one
    that does not answer in time (then stopped), fails the step, naming its log."""
    processes = _processes(ports)

    def gone() -> StepError | None:
        if helper.runs(processes.cmdline(pid), run.profile):
            return None
        return StepError(
            f"{helper.step}: the {helper.what} (pid {pid}) exited before answering {run.health_url}; "
            f"see the state directory's {log}"
        )

    def late(last: str) -> StepError:
        processes.terminate(pid, STOP_S)
        return StepError(
            f"{helper.step}: the {helper.what} did not answer {run.health_url} within {run.timeout_s:.0f} s "
            f"(last: {last}); stopped it"
        )

    _await_fingerprint(ports, run, gone, late)
    reporter.event(helper.what, profile=run.profile, pid=pid, url=run.health_url.removesuffix("/healthz"))


def run_helper_unit(
    helper: Helper,
    run: ExporterUnit | FrontUnit,
    ports: Ports,
    reporter: Reporter,
    prepare: Callable[[], None] = _nothing,
) -> None:
    """The helper as a systemd unit: the detached one stopped first (it holds the ports the unit binds), `prepare`
    and its config record (the unit's process reads them at start), the unit machinery (write, daemon-reload,
    enable, (re)start, watch it stay up), then /healthz."""
    if run.stop_pid and ports.processes is not None and helper.runs(ports.processes.cmdline(run.stop_pid), run.profile):
        ports.processes.terminate(run.stop_pid, STOP_S)
        reporter.event("stopped", **{helper.what: run.profile}, pid=run.stop_pid)
    prepare()
    ports.state.write(helper.config_key(run.profile), run.config)
    install_unit(run.install, ports, reporter)
    ports.state.write(
        helper.record_key(run.profile),
        {
            "pid": 0,
            "unit": run.install.unit,
            "fingerprint": run.fingerprint,
            "config": run.config,
            "date": ports.clock.now().isoformat(timespec="seconds"),
        },
    )
    wait_unit(helper, run, ports, reporter)


def wait_unit(helper: Helper, run: ExporterUnit | FrontUnit, ports: Ports, reporter: Reporter) -> None:
    """Wait until the helper's unit answers its /healthz with its fingerprint; one that does not in time fails the
    step, naming its journal."""
    unit = run.install.unit

    def late(last: str) -> StepError:
        return StepError(
            f"{helper.step}: unit {unit} did not answer {run.health_url} within {run.timeout_s:.0f} s (last: "
            f"{last}); see `journalctl -u {unit}`"
        )

    _await_fingerprint(ports, run, lambda: None, late)
    reporter.event(helper.what, profile=run.profile, unit=unit, url=run.health_url.removesuffix("/healthz"))


def _await_fingerprint(
    ports: Ports,
    run: ExporterRun | FrontRun | ExporterUnit | FrontUnit,
    gone: Callable[[], StepError | None],
    late: Callable[[str], StepError],
) -> None:
    """Poll `run.health_url` until it answers `run.fingerprint`; `gone` (the process exited) or, past
    `run.timeout_s`, `late` (given the last answer) is raised."""
    deadline = ports.clock.monotonic() + run.timeout_s
    while True:
        status, body = ports.http.get(run.health_url, timeout_s=1.0)
        if status == 200 and _fingerprint(body) == run.fingerprint:
            return
        failure = gone()
        if failure is not None:
            raise failure
        if ports.clock.monotonic() > deadline:
            raise late(f"{status} {body[:120]}")
        ports.clock.sleep(POLL_S)


def _fingerprint(body: str) -> str | None:
    try:
        return json.loads(body).get("fingerprint")
    except (ValueError, AttributeError):
        return None


def stop_helper(helper: Helper, stop: ExporterStop | FrontStop, ports: Ports, reporter: Reporter) -> None:
    """Stop the helper if its pid still runs it, and delete its records."""
    processes = _processes(ports)
    if stop.pid and helper.runs(processes.cmdline(stop.pid), stop.profile):
        processes.terminate(stop.pid, STOP_S)
        reporter.event("stopped", **{helper.what: stop.profile}, pid=stop.pid)
    ports.state.delete(helper.record_key(stop.profile))
    ports.state.delete(helper.config_key(stop.profile))
