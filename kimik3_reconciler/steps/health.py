"""Wait healthy: /health 200 after the 503 "Loading model" phase; fail fast if the server exits."""

from __future__ import annotations

import re

from kimik3_reconciler.errors import LoadFailed
from kimik3_reconciler.model.records import LOAD_RATE_KEY
from kimik3_reconciler.model.specs import HealthWait
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.report import Reporter

POLL_S = 0.2  # readiness is reported within this of /health flipping to 200
LOG_EVERY_S = 2.0
LOG_TAIL = 20
_PREFIX = re.compile(r"^\d+\.\d+\.\d+\.\d+ [IWED] ")  # llama-server's elapsed-time + level prefix


def load_phase(log_tail: str) -> str:
    """The server's latest log line, without its prefix: what the load is doing now."""
    lines = [ln for ln in log_tail.splitlines() if ln.strip()]
    return _PREFIX.sub("", lines[-1]).strip()[:70] if lines else "starting"


def wait_until_healthy(wait: HealthWait, ports: Ports, reporter: Reporter) -> None:
    started = ports.clock.monotonic()
    phase, phase_at = "starting", -LOG_EVERY_S
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
        if elapsed - phase_at >= LOG_EVERY_S:
            phase, phase_at = load_phase(ports.docker.container_logs(wait.container, 1)), elapsed
        reporter.progress(f"loading {wait.container}: {phase}", int(elapsed), int(wait.timeout_s))
        if health == "ok":
            reporter.event("healthy", container=wait.container, seconds=round(elapsed, 1))
            if wait.model_bytes and elapsed > 0:
                # The next plan predicts reload downtime from what this host really did.
                ports.state.write(LOAD_RATE_KEY, {"bytes": wait.model_bytes, "seconds": elapsed})
            return
        if elapsed > wait.timeout_s:
            raise LoadFailed(f"{wait.container}: not healthy after {wait.timeout_s:.0f} s (timeout derived from the "
                             "bytes to load)", ports.docker.container_logs(wait.container, LOG_TAIL))
        ports.clock.sleep(POLL_S)
