"""Wait healthy: /health 200 after the loading phase (llama-server answers 503 "Loading model"; vLLM's port refuses
connections: either is "not yet" until the container exits or the timeout); fail fast if the server exits."""

from __future__ import annotations

import re

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.errors import LoadFailed, StepError
from kimik3_reconciler.model.labels import CONTAINER_FINGERPRINT
from kimik3_reconciler.model.records import LOAD_RATE_KEY, WARM_LOAD_RATE_KEY, load_key
from kimik3_reconciler.model.specs import HealthWait
from kimik3_reconciler.observe.process_io import ProcessIo, parse_proc_io
from kimik3_reconciler.observe.server_log import ROOT_LOG_TAIL, classify_load_failure, first_error
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.report import Reporter
from kimik3_reconciler.steps.statistic import write_statistic

POLL_S = 0.2  # readiness is reported within this of /health flipping to 200
LOG_EVERY_S = 2.0
LOG_TAIL = 20
# dockerd's own stop (~13 s for a loading server) plus its start: long enough to see the policy start it again.
RESTART_GRACE_S = 30.0
_STOPPED_FROM_OUTSIDE = (0, 137, 143)  # a clean exit, SIGKILL, SIGTERM: what a stopping dockerd (or systemd) causes
# llama-server's elapsed-time + level prefix; vLLM's "(APIServer pid=1) INFO 12-03 23:40:00 [file.py:12] ".
_PREFIX = re.compile(
    r"^\d+\.\d+\.\d+\.\d+ [IWED] |^(?:\(\w+ pid=\d+\) )?(?:INFO|WARNING|ERROR|DEBUG) "
    r"\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] "
)


def load_phase(log_tail: str) -> str:
    """The server's latest log line, without its prefix: what the load is doing now."""
    lines = [ln for ln in log_tail.splitlines() if ln.strip()]
    return _PREFIX.sub("", lines[-1]).strip()[:70] if lines else "starting"


def _fail_launch(wait: HealthWait, inspect: dict | None, ports: Ports, reporter: Reporter) -> None:
    """Stop the failed container (kept for its logs) and raise LoadFailed naming the cause read from its log."""
    state = dict((inspect or {}).get("State") or {})  # as it failed, before the stop below changes it
    # llama-server exits 1 on any load error; read the tail before the stop adds its own lines.
    logs = ports.docker.container_logs(wait.container, LOG_TAIL) if inspect else ""
    signs = engine_for(wait.engine).log_signs  # the registry: the failed server's own log lines
    # A Python server's first error is printed long before its last lines (engines/base.py LogSigns.root).
    read_root = inspect is not None and bool(signs.root)  # an engine without the sign: no second read
    first = first_error(ports.docker.container_logs(wait.container, ROOT_LOG_TAIL), signs) if read_root else None
    status = state.get("Status", "gone") if inspect else "gone"
    if wait.unit and ports.units is not None:
        try:  # its `docker start --attach` ended with the exit: Restart=on-failure would start it every 10 s
            ports.units.systemctl("stop", wait.unit)
        except StepError:
            pass  # not installed yet (first apply) or not loaded: nothing supervises the container
    if inspect is not None:
        # Restart policy unless-stopped would crash-loop it (a bind failure every second): an explicit stop
        # ends that, and the next plan starts (or replaces) it as any stopped container.
        ports.docker.stop_container(wait.container)
        reporter.event("stopped", container=wait.container, why="failed launch")
    cause = classify_load_failure(
        state.get("ExitCode"), bool(state.get("OOMKilled")), logs, signs, local_model=wait.local_model
    )
    stopped = ", stopped" if inspect is not None else ""
    raise LoadFailed(
        f"container {wait.container} {cause.headline} [{cause.cause}: {status}, exit code "
        f"{state.get('ExitCode')}{stopped}]" + (f"; its log's first error: {first}" if first else ""),
        logs,
    )


def _started_again(wait: HealthWait, inspect: dict, ports: Ports, reporter: Reporter) -> bool:
    """Killed by a signal with no error in its log, then started again: a dockerd restart (it stops every
    container), not a failed load. Docker calls retry through the restart. Restart policy `unless-stopped`:
    dockerd starts it again; policy `no` (a systemd profile: systemd supervises it, and its unit's `docker start
    --attach` died with dockerd): nobody will, so the apply, which is there to make it run, starts it itself."""
    state = dict(inspect.get("State") or {})
    if state.get("ExitCode") not in _STOPPED_FROM_OUTSIDE or state.get("OOMKilled"):
        return False
    logs = ports.docker.container_logs(wait.container, LOG_TAIL)
    if classify_load_failure(None, False, logs, engine_for(wait.engine).log_signs).cause != "other":
        return False  # the server said why it failed (bind, allocation, GGUF): that is the answer
    policy = ((inspect.get("HostConfig") or {}).get("RestartPolicy") or {}).get("Name") or "no"
    if policy == "no":
        reporter.event(
            "starting",
            container=wait.container,
            why='killed by a signal with restart policy "no" (dockerd restarted?): nobody else starts it again',
        )
        ports.docker.start_container(wait.container)
        return True
    deadline = ports.clock.monotonic() + RESTART_GRACE_S
    while ports.clock.monotonic() < deadline:
        ports.clock.sleep(1.0)
        again = (ports.docker.inspect_container(wait.container) or {}).get("State") or {}
        if again.get("Status") == "running" and again.get("StartedAt") != state.get("StartedAt"):
            return True
    return False


class LoadWatch:
    """The load as the server's own I/O shows it: bytes its process has read (/proc/<pid>/io rchar) against the
    bytes it must load, with the rate since its first read and the ETA at that rate."""

    def __init__(self, model_bytes: int):
        self.model_bytes = model_bytes
        self.first: tuple[float, int] | None = None  # (elapsed, rchar) at the first sample that had read
        self.last: ProcessIo | None = None

    def sample(self, io: ProcessIo | None, elapsed: float) -> dict[str, float | int]:
        if io is None or not self.model_bytes:
            return {}
        self.last = io
        if self.first is None:
            self.first = (elapsed, io.rchar)
        since, base = self.first
        rate = (io.rchar - base) / (elapsed - since) if elapsed > since and io.rchar > base else 0.0
        left = max(self.model_bytes - io.rchar, 0)
        return {"read_bytes": io.rchar, "rate_bps": int(rate), **({"eta_s": round(left / rate, 1)} if rate else {})}

    def warm(self, planned_warm: bool) -> bool:
        """Was the load served by the page cache? The block layer's count says so when the kernel keeps it
        (storage reads below half the model), else the plan's pre-read does."""
        if self.last is None or self.last.rchar < self.model_bytes // 2:
            return planned_warm
        return self.last.read_bytes < self.model_bytes // 2


def _server_io(state: dict, ports: Ports) -> ProcessIo | None:
    pid = state.get("Pid")
    return parse_proc_io(ports.host.process_file(int(pid), "io")) if pid else None


def wait_until_healthy(wait: HealthWait, ports: Ports, reporter: Reporter) -> None:
    started = ports.clock.monotonic()
    phase, phase_at, resumed = "starting", -LOG_EVERY_S, False
    watch = LoadWatch(wait.model_bytes)
    while True:
        inspect = ports.docker.inspect_container(wait.container)
        state = (inspect or {}).get("State") or {}
        if inspect is None or state.get("Status") in ("exited", "dead") or state.get("Restarting"):
            # Waited out once: a second kill in one wait fails the load (`killed`, or `oom` when Docker says so).
            if inspect is not None and not resumed and _started_again(wait, inspect, ports, reporter):
                resumed = True
                reporter.event(
                    "restarted",
                    container=wait.container,
                    why="killed by a signal and started again (dockerd restarted?): waiting for the load again",
                )
                continue
            _fail_launch(wait, inspect, ports, reporter)
        health = ports.http.health(wait.url)
        elapsed = ports.clock.monotonic() - started
        if elapsed - phase_at >= LOG_EVERY_S:
            phase, phase_at = load_phase(ports.docker.container_logs(wait.container, 1)), elapsed
        io = watch.sample(_server_io(state, ports), elapsed)
        if io:  # the server's own reads against the bytes it must load: a real bar, rate and ETA
            reporter.progress(
                f"loading {wait.container}",
                min(int(io["read_bytes"]), wait.model_bytes),
                wait.model_bytes,
                phase=phase,
                seconds=round(elapsed, 1),
                **io,
            )
        else:  # its /proc is not readable (not root, another host's pid namespace): time against the timeout
            reporter.progress(f"loading {wait.container}", int(elapsed), int(wait.timeout_s), phase=phase)
        if health == "ok":
            warm = watch.warm(wait.warm)
            read = {"read_bytes": watch.last.rchar, "from_storage_bytes": watch.last.read_bytes} if watch.last else {}
            reporter.event(
                "healthy", container=wait.container, seconds=round(elapsed, 1), cache="warm" if warm else "cold", **read
            )
            if wait.model_bytes and elapsed > 0 and not resumed:
                # The next plan predicts reload downtime from what this host really did (a resumed wait is not
                # that), cold and warm (after a pre-read) apart.
                # Statistics: a full state dir warns here, it does not fail a load that succeeded (issue 30).
                if wait.partial_bytes is None:
                    write_statistic(
                        ports.state,
                        WARM_LOAD_RATE_KEY if warm else LOAD_RATE_KEY,
                        {"bytes": wait.model_bytes, "seconds": elapsed},
                        reporter,
                    )
                else:
                    # Part from the cache, part from disk: neither rate; the next plan's partial prediction is
                    # made of the two records as they stand.
                    reporter.event(
                        "load-rate-kept",
                        why=f"a partial pre-read ({wait.partial_bytes / (1 << 30):.1f} "
                        "GiB cached) made this load neither cold nor warm: the load rates are not updated",
                    )
                # The exporter's load seconds/bytes of this container's last load (issue 17).
                labels = ((inspect or {}).get("Config") or {}).get("Labels") or {}
                write_statistic(
                    ports.state,
                    load_key(wait.container),
                    {
                        "bytes": wait.model_bytes,
                        "seconds": elapsed,
                        "date": ports.clock.now().isoformat(timespec="seconds"),
                        "fingerprint": labels.get(CONTAINER_FINGERPRINT),
                        "cache": "warm" if warm else "cold",
                    },
                    reporter,
                )
            return
        if elapsed > wait.timeout_s:
            raise LoadFailed(
                f"{wait.container}: not healthy after {wait.timeout_s:.0f} s (timeout derived from the bytes to load)",
                ports.docker.container_logs(wait.container, LOG_TAIL),
            )
        ports.clock.sleep(POLL_S)
