"""Wait healthy: /health 200 after the 503 "Loading model" phase; fail fast if the server exits."""

from __future__ import annotations

from kimik3_reconciler.errors import LoadFailed
from kimik3_reconciler.model.plan import Step
from kimik3_reconciler.model.specs import HealthWait
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.report import Reporter

POLL_S = 0.5
LOG_TAIL = 20


def wait_healthy(step: Step, ports: Ports, reporter: Reporter) -> None:
    wait_until_healthy(step.spec, ports, reporter)


def wait_until_healthy(wait: HealthWait, ports: Ports, reporter: Reporter) -> None:
    started = ports.clock.monotonic()
    while True:
        inspect = ports.docker.inspect_container(wait.container)
        state = (inspect or {}).get("State") or {}
        if inspect is None or state.get("Status") in ("exited", "dead") or state.get("Restarting"):
            # llama-server exits 1 on any load error ("exiting due to model loading error").
            logs = ports.docker.container_logs(wait.container, LOG_TAIL) if inspect else ""
            status = state.get("Status", "gone") if inspect else "gone"
            raise LoadFailed(f"container {wait.container} {status} (exit code {state.get('ExitCode')}) "
                             "while loading the model", logs)
        health = ports.http.health(wait.url)
        elapsed = ports.clock.monotonic() - started
        reporter.progress(f"loading {wait.container} ({health})", int(elapsed), int(wait.timeout_s))
        if health == "ok":
            reporter.event("healthy", container=wait.container, seconds=round(elapsed, 1))
            return
        if elapsed > wait.timeout_s:
            raise LoadFailed(f"{wait.container}: not healthy after {wait.timeout_s:.0f} s (timeout derived from the "
                             "bytes to load)", ports.docker.container_logs(wait.container, LOG_TAIL))
        ports.clock.sleep(POLL_S)
