"""How the fleet's router processes (smg, kimik3's router) are kept running on the controller between `fleet apply`
runs: restarted when they exit (a crash, an OOM kill, `kill`).

- SYSTEMD, where systemd is PID 1 (`/run/systemd/system`) and kimik3 runs as root: each one a transient unit
  (`systemd-run --unit kimik3-smg-<fleet>` / `kimik3-router-<fleet>`, `Restart=always`), its output appended to the
  same log files as before. Transient, not a unit file enabled: `fleet apply` owns the router's lifetime (a layout
  change replaces it, the fleet's end stops it) and writes nothing under /etc; a reboot of the controller ends them
  (docs/operations.md, "kimik3's router": `fleet apply` starts them again).
- KEEPER anywhere else (a container, CI, a non-root user): each one started detached under `kimik3 fleet keep`
  (`keep`): a small parent that starts it again RESTART_S after it exits, and is itself not supervised (killed, its
  child dies with it: PR_SET_PDEATHSIG; the next `fleet apply` starts both).

Every command is an argv list: nothing here goes through a shell.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from kimik3_reconciler.adapters.router_smg import RouterError, start_detached

SYSTEMD, KEEPER = "systemd", "keeper"
RESTART_S = 1.0  # the pause before a process that exited is started again (both supervisors)
BACKOFF_MAX_S = 30.0  # the keeper's longest pause, for a process that keeps exiting at once
STEADY_S = 10.0  # a process that ran this long before it exited is started again after RESTART_S (no backoff)
# The keeper's first start that exits within this is not retried: a start that fails (bad flags, its port taken)
# exits in milliseconds, and `fleet apply` reports it at once instead of waiting out its start timeout.
FIRST_S = 2.0
PR_SET_PDEATHSIG = 1
Start = Callable[[list[str], Path, Callable[[], bool], float], int]


def supervisor() -> str:
    """SYSTEMD where this controller can run system units (systemd PID 1, root, systemd-run), else KEEPER."""
    if Path("/run/systemd/system").is_dir() and os.geteuid() == 0 and shutil.which("systemd-run"):
        return SYSTEMD
    return KEEPER


def describe(kind: str) -> str:
    """For `fleet plan`'s router line."""
    if kind == SYSTEMD:
        return "each a systemd unit restarted when it exits (not after a reboot: `fleet apply` starts them again)"
    return (
        "each kept by `kimik3 fleet keep` (no systemd here): restarted when it exits; the keeper itself and a reboot "
        "are not supervised (`fleet apply` starts them again)"
    )


def unit_name(role: str, fleet: str) -> str:
    """`kimik3-<role>-<fleet>.service`; a character a unit name cannot hold escaped as systemd-escape does."""
    escaped = "".join(c if c.isascii() and (c.isalnum() or c in "_.") else f"\\x{ord(c):02x}" for c in fleet)
    return f"kimik3-{role}-{escaped}.service"


def systemd_run_argv(unit: str, argv: list[str], log: Path) -> list[str]:
    """A transient service running `argv`, restarted RESTART_S after it exits whatever its status, its output
    appended to `log`; `--collect`: unloaded once stopped, so the next `fleet apply` can start it again by name."""
    return [
        "systemd-run",
        "--unit",
        unit,
        "--collect",
        "--description",
        "kimik3 fleet router (started by kimik3 fleet apply)",
        "-p",
        "Restart=always",
        "-p",
        f"RestartSec={RESTART_S:g}",
        # smg and kimik3's router drain on SIGTERM; the default 90 s would hold `fleet apply`'s replacement.
        "-p",
        "TimeoutStopSec=10",
        "-p",
        f"StandardOutput=append:{log}",
        "-p",
        f"StandardError=append:{log}",
        "--",
        *argv,
    ]


def _systemctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=60)


def unit_show(unit: str, prop: str) -> str:
    return _systemctl("show", "-p", prop, "--value", unit).stdout.strip()


NOT_LOADED = 5  # `systemctl stop`'s status for a unit that is not loaded (nothing to stop)


def stop_unit(unit: str) -> None:
    """The unit stopped (its process SIGTERMed, SIGKILLed after TimeoutStopSec) and unloaded; none loaded: nothing.
    RouterError when systemctl refused (`fleet apply` run as another user than the one that started it: access
    denied): the caller would otherwise drop the unit from its record while it still runs, and nothing stops it."""
    stopped = _systemctl("stop", unit)
    if stopped.returncode not in (0, NOT_LOADED) and "not loaded" not in stopped.stderr:
        raise RouterError(f"systemctl stop {unit}: {stopped.stderr.strip()[:300]} (run as the user that started it)")
    _systemctl("reset-failed", unit)  # a failed one stays loaded under its name otherwise


def start_unit(unit: str, argv: list[str], log: Path, answers: Callable[[], bool], timeout_s: float) -> int:
    """`argv` as the transient unit `unit` (one of that name left over stopped first); its main pid once `answers()`
    holds. RouterError (the unit stopped) when it exited meanwhile (systemd restarted it) or did not answer in time."""
    log.parent.mkdir(parents=True, exist_ok=True)
    stop_unit(unit)
    started = subprocess.run(systemd_run_argv(unit, argv, log), capture_output=True, text=True, timeout=60)
    if started.returncode:
        raise RouterError(f"systemd-run {unit}: {started.stderr.strip()[:300]}")
    deadline = time.monotonic() + timeout_s
    while not answers():
        # One restart already: the process exits at start (bad flags, port taken): waiting on would only loop.
        if unit_show(unit, "NRestarts") not in ("", "0") or time.monotonic() > deadline:
            stop_unit(unit)
            raise RouterError(f"{Path(argv[0]).name} did not answer as unit {unit} (log: {log})")
        time.sleep(0.2)
    pid = unit_show(unit, "MainPID")
    return int(pid) if pid.isdigit() else 0


def systemd_start(unit: str) -> Start:
    return lambda argv, log, answers, timeout_s: start_unit(unit, argv, log, answers, timeout_s)


def keeper_argv(argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "kimik3_reconciler", "fleet", "keep", "--", *argv]


def keeper_start(argv: list[str], log: Path, answers: Callable[[], bool], timeout_s: float) -> int:
    """`argv` under a detached keeper; the keeper's pid (what `fleet apply` stops) once `answers()` holds."""
    return start_detached(keeper_argv(argv), log, answers, timeout_s)


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the keeper dies (killed itself, its child would run on unrecorded)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def pause_after(ran_s: float, pause_s: float) -> float:
    """The keeper's pause before the next start: RESTART_S after a run of STEADY_S or more, else doubled (up to
    BACKOFF_MAX_S): a process that exits at once (its port taken by another) is not started 1000 times an hour."""
    return RESTART_S if ran_s >= STEADY_S else min(max(pause_s * 2, RESTART_S), BACKOFF_MAX_S)


def keep(argv: list[str], say: Callable[[str], None]) -> int:
    """Run `argv`, start it again whenever it exits, until SIGTERM/SIGINT (passed on to it; then its exit status).
    A first run that ends within FIRST_S is not retried (its status returned): a start that fails is the caller's.
    The status as a shell gives it: 128 + N for a child ended by signal N."""
    stopping = False
    child: subprocess.Popen | None = None

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    name, pause, first = Path(argv[0]).name, 0.0, True
    while True:
        began = time.monotonic()
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)  # noqa: PLW1509
        if stopping:  # the signal came between two starts: this child has not seen it
            child.terminate()
        code = child.wait()
        ran = time.monotonic() - began
        if stopping or (first and ran < FIRST_S):
            return code if code >= 0 else 128 - code
        first, pause = False, pause_after(ran, pause)
        say(
            f"kimik3 keep: {name} (pid {child.pid}) exited with status {code} after {ran:.0f} s; "
            f"starting it again in {pause:g} s"
        )
        deadline = time.monotonic() + pause
        while not stopping and time.monotonic() < deadline:
            time.sleep(0.1)
        if stopping:
            return code if code >= 0 else 128 - code
