"""`kimik3 reconcile FILE`: the level-triggered loop Argo CD and Flux run, for one host and one profile.

Every interval a pass reads the profile, takes the host lock (no wait: a pass finding another kimik3
at work is skipped), plans, and applies only when the plan has changes (then verifies, reverting to
the last good profile on failure, as `apply` does). A converged pass costs one plan. Each pass is
one JSON line on stdout. A profile that stops parsing is logged and the host is left as it is: the
last good profile keeps serving. A failed apply of a profile text is retried with a doubling wait
(the interval times 2, 4, ... up to an hour), so a profile that cannot load does not take the
serving container down every interval; an edit of the file ends the wait.

Each pass records the loop (`reconcile/<profile>.json`: pid, host, file, interval, last pass). A pass whose plan
would stop a container that another profile's live loop keeps running refuses (`conflict`, exit 3) naming that
loop: two loops for profiles sharing GPUs or a port would otherwise stop each other every pass, forever.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kimik3_reconciler.errors import (
    BuildFailed,
    InputError,
    Kimik3Error,
    LoadFailed,
    LocalFileError,
    LockHeld,
    LoopConflict,
    PlanError,
    ProfileError,
    VerifyFailed,
)
from kimik3_reconciler.locking import live_loop, new_holder
from kimik3_reconciler.model.host_lock import LockHolder
from kimik3_reconciler.model.loaded_profile import LoadedProfile
from kimik3_reconciler.model.plan import Plan
from kimik3_reconciler.model.records import reconcile_loop_key
from kimik3_reconciler.orchestrator import Orchestrator

JITTER_FRACTION = 0.1  # --jitter adds up to 10 % of the interval to each wait
BACKOFF_CAP_S = 3600.0  # a failing profile is retried at least hourly
Line = dict[str, Any]


class Stopped(BaseException):
    """SIGTERM/SIGINT arrived during a pass: unwinds it (the host lock is released on the way out)."""


class ReconcileLoop:
    """The passes and the waits between them; `emit` writes each pass's JSON line."""

    def __init__(
        self,
        path: str,
        orchestrator: Orchestrator,
        load: Callable[[str], LoadedProfile],
        emit: Callable[[Line], None],
        interval_s: float,
        jitter: bool = False,
        verify_server: bool = True,
        rng: random.Random | None = None,
    ):
        self.path, self.orchestrator, self.load, self.emit = path, orchestrator, load, emit
        self.interval_s, self.jitter, self.verify_server = interval_s, jitter, verify_server
        self.rng = rng or random.Random()
        self.clock = orchestrator.ports.clock
        self.last_parsed: tuple[str, str] | None = None  # (profile name, when it last parsed)
        self.failures = 0  # failed applies in a row of `failed_text`, retried after `retry_at` (monotonic)
        self.failed_text: str | None = None
        self.retry_at = 0.0
        self.running = False  # a pass is in progress (a signal then interrupts it)
        self.me: LockHolder | None = None  # this loop, as its reconcile/<profile>.json names it

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.running = True
            try:
                self.run_pass()
            finally:
                self.running = False
            if stop.wait(self.next_wait()):
                return

    def next_wait(self) -> float:
        extra = self.rng.uniform(0, JITTER_FRACTION * self.interval_s) if self.jitter else 0.0
        return self.interval_s + extra

    def run_pass(self) -> Line:
        """One pass; its line is emitted and returned (`exit_code` is what `--once` exits with)."""
        started, at = self.clock.monotonic(), self.clock.now().isoformat(timespec="seconds")
        line: Line = {"time": at, "file": self.path, "profile": self.last_parsed[0] if self.last_parsed else None}
        try:
            loaded = self.load(self.path)
        except (ProfileError, InputError) as exc:  # keep serving: nothing on the host is looked at or touched
            line.update(
                result="error", exit_code=exc.exit_code, error=f"profile: {exc}", serving=_serving(self.last_parsed)
            )
            return self._emit(line, started)
        self.last_parsed = (loaded.profile.name, at)
        try:
            self._register(loaded.profile.name, at)
        except OSError as exc:
            # A full or read-only state dir: the loop's record is what other loops read before stopping this
            # profile's container; missing one refresh is not worth ending the loop (it exited 8 before) nor
            # skipping the pass that may have to bring a server back (issue 30). The line says so.
            line["warning"] = f"loop record not refreshed: {LocalFileError.from_os_error(exc)}"
        # GitOps checkouts (git-sync) swap a symlinked folder: relative paths follow the file read now.
        self.orchestrator.base_dir = Path(self.path).resolve().parent
        line["profile"] = loaded.profile.name
        if loaded.text == self.failed_text and self.clock.monotonic() < self.retry_at:
            line.update(
                result="backoff",
                exit_code=0,
                failures=self.failures,
                retry_in_s=round(self.retry_at - self.clock.monotonic()),
            )
            return self._emit(line, started)
        line.update(self._converge(loaded))
        return self._emit(line, started)

    def _converge(self, loaded: LoadedProfile) -> Line:
        try:
            with self.orchestrator.locked("reconcile", loaded.profile, timeout_s=0):
                result = self.orchestrator.apply_or_revert(
                    loaded, self._check(loaded) if self.verify_server else None, admit=self._admit
                )
        except LockHeld as exc:  # another kimik3 is at work: this pass is skipped, the next one looks again
            return {"result": "locked", "exit_code": exc.exit_code, "holder": exc.lock_id, "error": str(exc)}
        except LoopConflict as exc:  # nothing ran; the next pass looks again (the other loop may have stopped)
            return {"result": "conflict", "exit_code": exc.exit_code, "error": str(exc)}
        except (ProfileError, InputError, PlanError) as exc:  # refused before anything ran: nothing to back off from
            return {"result": "error", "exit_code": exc.exit_code, "error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - the loop outlives any one failed pass; the line says why
            if isinstance(exc, (LoadFailed, VerifyFailed, BuildFailed)):
                # This profile text fails on this host: retry it less often. A daemon or hub outage
                # (TransientError, HubError) is not the profile's fault: the next pass tries again.
                self._back_off(loaded.text)
            if isinstance(exc, OSError):  # a full disk, a read-only state dir: named as the CLI names it
                exc = LocalFileError.from_os_error(exc)
            code = exc.exit_code if isinstance(exc, Kimik3Error) else 1
            return {
                "result": "error",
                "exit_code": code,
                "error": str(exc) or type(exc).__name__,
                "failures": self.failures,
                "retry_in_s": max(0, round(self.retry_at - self.clock.monotonic())),
            }
        self.failures, self.failed_text = 0, None
        steps = [f"{s.kind} {s.action.name.lower()} {s.target}" for s in result.executed]
        return {
            "result": "changed" if result.changed else "converged",
            "exit_code": 0,
            "steps": steps,
            "rounds": result.rounds,
        }

    def _register(self, profile: str, at: str) -> None:
        """Write (refresh) this loop's record: other profiles' loops read it before stopping our container."""
        state = self.orchestrator.ports.state
        if self.me is None or self.me.profile != profile:
            if self.me is not None:  # the file now names another profile: the old record is not ours any more
                self.forget()
            self.me = new_holder("reconcile", profile, self.clock)
        state.write(
            reconcile_loop_key(profile),
            {
                "holder": self.me.to_json(),
                "file": str(Path(self.path).resolve()),
                "interval_s": self.interval_s,
                "last_pass": at,
            },
        )

    def forget(self) -> None:
        """The loop stops: its record goes (only if it is still this loop's)."""
        if self.me is None:
            return
        key = reconcile_loop_key(self.me.profile)
        record = self.orchestrator.ports.state.read(key) or {}
        if (record.get("holder") or {}).get("id") == self.me.id:
            self.orchestrator.ports.state.delete(key)

    def _admit(self, plan: Plan) -> None:
        """Refuse a plan that stops a container another profile's live reconcile loop keeps running."""
        for step in plan.changes:
            if step.kind != "conflict":
                continue
            found = live_loop(self.orchestrator.ports, step.target)
            if found is None or (self.me is not None and found[0].id == self.me.id):
                continue
            other, record = found
            raise LoopConflict(
                f"this pass would stop {step.target} ({step.reason.split(';')[0]}), but another reconcile loop keeps "
                f"{step.target} running: `kimik3 reconcile {record.get('file')}` (pid {other.pid} on {other.host}, "
                f"since {other.started}, last pass {record.get('last_pass')}). Two loops for conflicting profiles "
                "would stop each other every pass; nothing was changed. Stop one of the loops, or make the profiles "
                "stop conflicting (gpus, serve.port, systemd.conflicts)"
            )

    def _back_off(self, text: str) -> None:
        self.failures = self.failures + 1 if text == self.failed_text else 1
        self.failed_text = text
        wait = min(self.interval_s * 2**self.failures, max(self.interval_s, BACKOFF_CAP_S))
        self.retry_at = self.clock.monotonic() + wait

    def _check(self, loaded: LoadedProfile) -> Callable[[], None]:
        # lazy, as before: verify stays off the import path
        from kimik3_reconciler.verify import verification

        return verification(self.orchestrator, loaded)

    def _emit(self, line: Line, started: float) -> Line:
        line["duration_s"] = round(self.clock.monotonic() - started, 3)
        self.emit(line)
        return line


def _serving(last_parsed: tuple[str, str] | None) -> str:
    if last_parsed is None:
        return "nothing parsed yet in this run: the host is left as it is"
    return f"{last_parsed[0]} as last parsed at {last_parsed[1]}: the host is left as it is"


def run_until_stopped(loop: ReconcileLoop) -> int:
    """Run passes until SIGTERM/SIGINT (exit 0). A signal during a pass interrupts it (as Ctrl-C interrupts
    apply: downloads resume, the next run converges); a second signal leaves at once."""
    stop = threading.Event()
    caught: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        if stop.is_set():  # the second signal: the operator does not want to wait for anything
            os._exit(128 + signum)
        stop.set()
        caught.append(signal.Signals(signum).name)
        if loop.running:
            raise Stopped(caught[0])

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    interrupted = False
    try:
        loop.run(stop)
    except Stopped:
        interrupted = True
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        loop.forget()
    loop.emit(
        {
            "time": loop.clock.now().isoformat(timespec="seconds"),
            "file": loop.path,
            "result": "stopped",
            "signal": caught[0] if caught else None,
            "interrupted_pass": interrupted,
        }
    )
    return 0
