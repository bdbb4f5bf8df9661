"""The only orchestrator: observe -> plan -> execute the changing steps in order -> observe again.

It stops when a plan is all NOOP (converged) or after `max_rounds` (ConvergenceError naming what
still wants changes). A failing step stops the round: nothing after it runs, and the error
(already one of errors.py's) goes to the CLI.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from kimik3_reconciler.errors import ConvergenceError, Kimik3Error, LoadFailed, VerifyFailed
from kimik3_reconciler.locking import holding
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.host_lock import LockHolder
from kimik3_reconciler.model.plan import Plan, Step
from kimik3_reconciler.model.profile_source import LoadedProfile, parse_profile
from kimik3_reconciler.model.records import last_good_key
from kimik3_reconciler.observe import observe
from kimik3_reconciler.planning import gate_reference, plan, plan_destroy, plan_prune
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps import Reporter, check_executable, execute

DEFAULT_ROUNDS = 3


@dataclass
class ApplyResult:
    """What apply did: every executed step, by round, and the final (converged) plan."""

    executed: list[Step] = field(default_factory=list)
    rounds: int = 0
    final: Plan | None = None

    @property
    def changed(self) -> bool:
        return bool(self.executed)


class Engine:
    def __init__(self, ports: Ports, reporter: Reporter, base_dir: Path, dockerfile: Path):
        self.ports, self.reporter = ports, reporter
        self.base_dir, self.dockerfile = base_dir, dockerfile

    def locked(self, operation: str, profile: str, timeout_s: float) -> AbstractContextManager[LockHolder | None]:
        """The per-host lock around a change (apply, destroy, prune, a reconcile pass): one kimik3 at a
        time; waits up to `timeout_s`, then LockHeld (exit 5) naming the holder (locking.py)."""
        return holding(self.ports, self.reporter.event, operation, profile, timeout_s)

    def observe(self, loaded: LoadedProfile, rehash: bool = False) -> Observed:
        """`rehash` (`--verify`): re-hash the cached model files instead of trusting the verified manifest."""
        profile = loaded.profile
        return observe(profile, self.ports, self.base_dir, self.dockerfile, rehash, gate_reference(profile))

    def plan(self, loaded: LoadedProfile, rehash: bool = False) -> Plan:
        warnings = tuple(str(w) for w in loaded.warnings)
        return check_executable(plan(loaded.profile, self.observe(loaded, rehash), warnings))

    def apply(self, loaded: LoadedProfile, max_rounds: int = DEFAULT_ROUNDS, rehash: bool = False) -> ApplyResult:
        """Converge; `rehash` applies to the first observation only (what it finds missing is fetched again)."""
        result = ApplyResult()
        for round_no in range(1, max_rounds + 1):
            current = self.plan(loaded, rehash=rehash and round_no == 1)
            result.rounds, result.final = round_no, current
            if current.converged:
                return result
            for step in current.changes:
                self.reporter.event("step", kind=step.kind, action=step.action.name.lower(),
                                    target=step.target, reason=step.reason)
                execute(step, self.ports, self.reporter)
                result.executed.append(step)
        final = self.plan(loaded)
        result.final = final
        if not final.converged:
            pending = tuple(f"{s.kind} {s.target}: {s.reason}" for s in final.changes)
            raise ConvergenceError(f"not converged after {max_rounds} rounds:\n  " + "\n  ".join(pending), pending)
        return result

    def apply_or_revert(self, loaded: LoadedProfile, check: Callable[[], None] | None = None,
                        max_rounds: int = DEFAULT_ROUNDS, rehash: bool = False) -> ApplyResult:
        """Apply; then `check` (verify). On success record the profile as the last good one. When
        the gate, the load or the check fails, relaunch the last good profile and re-raise, saying so."""
        try:
            result = self.apply(loaded, max_rounds, rehash)
            if check is not None and result.changed:
                check()
        except (LoadFailed, VerifyFailed) as failure:  # GateFailed and SmokeFailed are LoadFailed
            last = self.ports.state.read(last_good_key(loaded.profile.name))
            if last is None or last.get("text") == loaded.text:
                raise
            self.reporter.event("revert", to=last.get("source"), recorded=last.get("date"), reason=str(failure)[:200])
            try:
                self.apply(parse_profile(last["text"], source=f"last good {loaded.profile.name} ({last.get('date')})"),
                           max_rounds)
            except Kimik3Error as revert_failure:
                raise type(failure)(f"{failure}\nthe revert to the last good profile (recorded {last.get('date')}) "
                                    f"failed too: {revert_failure}") from None
            raise type(failure)(f"{failure}\nreverted to the last good profile (recorded {last.get('date')})") from None
        if result.changed or self.ports.state.read(last_good_key(loaded.profile.name)) is None:
            self.ports.state.write(last_good_key(loaded.profile.name), {
                "text": loaded.text, "source": loaded.source,
                "date": self.ports.clock.now().isoformat(timespec="seconds")})
        return result

    def prune(self, loaded: LoadedProfile, execute_steps: bool = True) -> Plan:
        pruning = check_executable(plan_prune(loaded.profile, self.observe(loaded)))
        if execute_steps:
            for step in pruning.changes:
                execute(step, self.ports, self.reporter)
        return pruning

    def destroy(self, loaded: LoadedProfile, *, images: bool, model: bool, execute_steps: bool = True) -> Plan:
        teardown = check_executable(plan_destroy(loaded.profile, self.observe(loaded), images=images, model=model))
        if execute_steps:
            for step in teardown.changes:
                execute(step, self.ports, self.reporter)
        return teardown
