"""The only orchestrator: observe -> plan -> execute the changing steps in order -> observe again.

It stops when a plan is all NOOP (converged) or after `max_rounds` (ConvergenceError naming what
still wants changes). A failing step stops the round: nothing after it runs, and the error
(already one of errors.py's) goes to the CLI.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from kimik3_reconciler.errors import (
    ConvergenceError,
    HubError,
    InputError,
    Kimik3Error,
    LoadFailed,
    LocalFileError,
    PlanError,
    StalePlan,
    VerifyFailed,
)
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.loaded_profile import LoadedProfile
from kimik3_reconciler.model.plan import Plan, Step
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.records import apply_key, cluster_members_key, last_good_key, unverified_key
from kimik3_reconciler.model.state_room import records_after, shortfall, takes_server_down
from kimik3_reconciler.observe import observe
from kimik3_reconciler.observe.cluster import dropped_node_hosts, recorded_members
from kimik3_reconciler.observe.docker_objects import parse_container
from kimik3_reconciler.observe.workers import recorded_workers
from kimik3_reconciler.planning import gate_reference, plan, plan_destroy, plan_prune, refuse_by_host_gate
from kimik3_reconciler.planning.cluster_render import node_hosts, node_locks, node_members
from kimik3_reconciler.planning.worker_step import (
    docker_host,
    dropped_worker_hosts,
    recorded_worker_hosts,
    worker_hosts,
)
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps import Reporter, check_executable, execute

if TYPE_CHECKING:
    from kimik3_reconciler.locking import OtherHost
    from kimik3_reconciler.model.host_lock import LockHolder
    from kimik3_reconciler.model.plan_file import SavedPlan

DEFAULT_ROUNDS = 3
Check = Callable[[], None]  # `kimik3 verify` of the profile being applied: VerifyFailed when a check fails


@dataclass
class ApplyResult:
    """What apply did: every executed step, by round, and the final (converged) plan."""

    executed: list[Step] = field(default_factory=list)
    rounds: int = 0
    final: Plan | None = None

    @property
    def changed(self) -> bool:
        return bool(self.executed)


@contextmanager
def located(loaded: LoadedProfile) -> Iterator[None]:
    """A refusal of profile fields (the planner's, or a file a field names that cannot be used), with each field's
    file:line: the planner and the observers see no file."""
    try:
        yield
    except (PlanError, InputError, HubError) as exc:
        # A refusal that does not say which fields it refuses: those its text names (every refusal of a written
        # field gets its line, whichever planner, observer or hub answer made it: "check model.quant").
        fields = getattr(exc, "fields", ()) or loaded.fields_in(str(exc))
        if not fields:
            raise
        where = "\n".join(f"  at {loaded.where(path)}" for path in fields)
        placed = copy.copy(exc)  # same class, code and attributes; the text gains the lines
        placed.args = (f"{exc}\n{where}", *exc.args[1:])
        if isinstance(placed, (PlanError, InputError)):
            placed.fields = fields
        raise placed from None


class Orchestrator:
    def __init__(self, ports: Ports, reporter: Reporter, base_dir: Path, dockerfile: Path):
        self.ports, self.reporter = ports, reporter
        self.base_dir, self.dockerfile = base_dir, dockerfile
        # A step of this apply took a server down and no launch has been healthy since (issue 30): any failure
        # now must end with a server running, so apply_or_revert restores the last good profile.
        self._down = False
        # The records this apply writes at its end (the last good profile, the workers), counted with the steps'
        # own before a server is taken down; set by apply_or_revert.
        self._closing: tuple[dict | None, int] = (None, 0)
        self.restoring = False  # this orchestrator brings back the last good profile: nothing may refuse it
        # Holds of the front's clients (issue 29: payloads that `holds_clients`) not released yet, and whether
        # apply() releases them at its end (apply_or_revert releases after its check or its revert instead).
        self._held: list = []
        self._release_after_apply = True

    def locked(self, operation: str, profile: Profile, timeout_s: float) -> AbstractContextManager[LockHolder | None]:
        """The per-host lock around a change (apply, destroy, prune, a reconcile pass): one kimik3 at a
        time; waits up to `timeout_s`, then LockHeld (exit 5) naming the holder (locking.py). Taken on this
        host, then on every other host the change may touch (`_other_hosts`)."""
        from kimik3_reconciler.locking import holding  # the commands that change the host; a plan takes no lock

        return holding(self.ports, self.reporter.event, operation, profile.name, timeout_s, self._other_hosts(profile))

    def _other_hosts(self, profile: Profile) -> tuple[OtherHost, ...]:
        """The hosts an apply of `profile` locks besides this one, named as the profile names them: its RPC workers,
        its cluster's nodes (each refused by its Docker's field), then the recorded ones it dropped (their rpc-server
        or member is removed)."""
        from kimik3_reconciler.locking import OtherHost

        state, name = self.ports.state, profile.name
        return (
            *(OtherHost(h) for h in worker_hosts(profile)),
            *(OtherHost(h, node=True, field=field) for h, field in node_locks(profile)),
            *(OtherHost(h, dropped=True) for h in dropped_worker_hosts(profile, recorded_workers(state, name))),
            *(
                OtherHost(h, node=True, dropped=True)
                for h in dropped_node_hosts(profile, recorded_members(state, name))
            ),
        )

    def force_unlock(self, lock_id: str, profile: Profile | None) -> str:
        """`kimik3 force-unlock ID [FILE]`: lock `lock_id` removed here and on the other hosts a run of that profile
        locks (FILE's profile: `_other_hosts`; without it, the recorded RPC workers and cluster nodes of the profile
        this host's lock names), each named as the profile names it."""
        if self.ports.lock is None:
            raise InputError("no lock is wired")
        from kimik3_reconciler.locking import OtherHost, force_unlock

        if profile is not None:
            others = self._other_hosts(profile)
        else:
            record = self.ports.lock.holder()[0]
            named = record.profile if record is not None and record.id == lock_id else None
            # The hosts this profile's applies launched on: its RPC workers and its cluster members, as recorded.
            others = (
                (
                    *(OtherHost(h) for h in recorded_worker_hosts(recorded_workers(self.ports.state, named))),
                    *(
                        OtherHost(h, node=True)
                        for h in recorded_worker_hosts(recorded_members(self.ports.state, named))
                    ),
                )
                if named
                else ()
            )
        if others and self.ports.worker_lock is None:
            raise InputError("no lock port for worker hosts is wired")
        hint = (
            ""
            if profile
            else "a lock on an RPC worker's or a cluster node's host: kimik3 force-unlock ID FILE (FILE: the profile)"
        )
        return force_unlock(self.ports.lock, lock_id, tuple((o, self.ports.worker_lock(o.host)) for o in others), hint)

    def observe(
        self, loaded: LoadedProfile, rehash: bool = False, gate_first: bool = False, stat_only: bool = False
    ) -> Observed:
        """`rehash` (`--verify`): re-hash the cached model files instead of trusting the verified manifest;
        `stat_only` (`kimik3 status`): hash nothing, report a file whose stat moved as `changed`;
        `gate_first`: the host gate judges the host facts before any hub request (a no-GPU host is refused
        at once, not after the hub's retries)."""
        profile = loaded.profile
        before_hub = (lambda partial: refuse_by_host_gate(profile, partial)) if gate_first else None
        with located(loaded):
            return observe(
                profile,
                self.ports,
                self.base_dir,
                self.dockerfile,
                rehash,
                gate_reference(profile),
                before_hub=before_hub,
                stat_only=stat_only,
            )

    def plan(self, loaded: LoadedProfile, rehash: bool = False) -> Plan:
        return self._plan(loaded, self.observe(loaded, rehash, gate_first=True))

    def _plan(self, loaded: LoadedProfile, observed: Observed) -> Plan:
        with located(loaded):
            return check_executable(plan(loaded.profile, observed, tuple(str(w) for w in loaded.warnings)))

    def save_plan(self, loaded: LoadedProfile, source: str, rehash: bool = False) -> tuple[Plan, SavedPlan]:
        """The plan, and the same plan with the facts it was made from (`kimik3 plan FILE -out PLAN`);
        `source`: the profile file's absolute path, read again by `apply PLAN`."""
        observed = self.observe(loaded, rehash, gate_first=True)
        made = self._plan(loaded, observed)
        from kimik3_reconciler.model.plan_file import SavedPlan  # saved plans only
        from kimik3_reconciler.planning.basis import observed_basis

        basis = observed_basis(loaded.profile, observed)
        return made, SavedPlan(
            profile_source=source,
            profile_text=loaded.text,
            basis=basis,
            steps=made.steps,
            created=self.ports.clock.now().isoformat(timespec="seconds"),
            rehash=rehash,
            warnings=made.warnings,
        )

    def apply_saved(
        self, loaded: LoadedProfile, saved: SavedPlan, profile_text_now: str | None, check: Check | None = None
    ) -> ApplyResult:
        """Execute exactly `saved`'s steps, once nothing moved since it was made (else StalePlan, nothing run);
        then wait for health as apply does. `profile_text_now`: the profile file as it reads now; `check`: as
        for `apply`."""
        try:
            return self._apply_saved(loaded, saved, profile_text_now, check)
        finally:
            if self._release_after_apply:
                self._release_held()

    def _apply_saved(
        self, loaded: LoadedProfile, saved: SavedPlan, profile_text_now: str | None, check: Check | None
    ) -> ApplyResult:
        ports = self.ports.verifying(check)
        # Nothing is down yet: a stale plan or a hub error from the observation below must never read as a
        # failure while a server is down (that would revert), whatever an earlier apply of this instance left.
        self._down = False
        observed = self.observe(loaded, saved.rehash, gate_first=True)
        from kimik3_reconciler.planning.basis import stale_reasons

        moved = stale_reasons(saved, loaded.profile, profile_text_now, observed, self._plan(loaded, observed))
        if moved:
            raise StalePlan(
                f"the saved plan (made {saved.created}) is stale: the host or the profile moved since; "
                f"nothing was changed. Plan again (kimik3 plan {saved.profile_source} -out PLAN):\n  - "
                + "\n  - ".join(moved),
                moved,
            )
        result = ApplyResult(rounds=1)
        self._execute(self._runnable(saved.changes, result, ports), result, ports)
        final = self.plan(loaded)
        # A load the saved plan did not wait for (it was made while the container was loading): wait now.
        self._execute(tuple(s for s in self._runnable(final.changes, result, ports) if s.spec.waits), result, ports)
        result.final = self._settled(self.plan(loaded) if result.executed else final, result)
        pending_steps = self._runnable(result.final.changes, result, ports)
        if pending_steps:
            pending = tuple(f"{s.kind} {s.target}: {s.reason}" for s in pending_steps)
            raise ConvergenceError(
                "the saved plan ran, but the host still wants changes (plan again):\n  " + "\n  ".join(pending), pending
            )
        return result

    def _execute(self, steps: tuple[Step, ...], result: ApplyResult, ports: Ports) -> None:
        for at, step in enumerate(steps):
            if takes_server_down(step.spec) and not self._down:
                self._check_room(steps[at:])
                self._down = True  # before it runs: a step that fails halfway (removed, not relaunched) counts
            self.reporter.event(
                "step", kind=step.kind, action=step.action.name.lower(), target=step.target, reason=step.reason
            )
            execute(step, ports, self.reporter)
            if step.spec is not None and step.spec.holds_clients:
                self._held.append(step.spec)
            if step.spec is not None and step.spec.waits:
                self._down = False  # a launch answers /health: a server runs again
            result.executed.append(step)

    def _release_held(self) -> None:
        """Send the front's held clients on to whatever serves now (issue 29): once per hold, whatever way the
        apply ended (a release that fails is an event; the front's lease lets go by itself)."""
        held, self._held = self._held, []
        if not held:
            return
        from kimik3_reconciler.steps.front import release_clients  # only after a hold

        released = set()
        for spec in held:
            if (spec.profile, spec.control_url) not in released:  # one release per front, however many holds
                released.add((spec.profile, spec.control_url))
                release_clients(spec, self.ports, self.reporter)

    def _check_room(self, steps: tuple[Step, ...]) -> None:
        """Refuse (exit 8) before a server is taken down when the state dir cannot hold the records the rest of the
        apply must write: the old server keeps serving, rather than a full disk failing a record with none left."""
        room = None if self.restoring else self.ports.state.room()
        if room is None:  # a revert restores whatever it finds; a state dir that cannot be measured: written as before
            return
        last_good, workers = self._closing
        why = shortfall(room, records_after(steps, last_good, workers))
        if why:
            raise LocalFileError(
                f"{why}; nothing was stopped, the running server keeps serving. Free space there "
                "(or point KIMIK3_STATE_DIR at a larger disk) and apply again [errno ENOSPC]"
            )

    @staticmethod
    def _runnable(steps: tuple[Step, ...], result: ApplyResult, ports: Ports) -> tuple[Step, ...]:
        """The changing steps this apply runs. A step that `checks` (a launch an earlier apply left unverified)
        needs the apply's check (none: --no-verify-server, the launch stays unverified for a later apply), and is
        left out once this apply started the server: apply_or_revert checks that launch at the end."""
        skip_checks = ports.verifier is None or _launched(result)
        return tuple(s for s in steps if s.changes and not (skip_checks and s.spec.checks))

    @staticmethod
    def _settled(current: Plan, result: ApplyResult) -> Plan:
        """The plan as this apply leaves it: the check of its own launch is apply_or_revert's, not pending."""
        if not _launched(result):
            return current
        return replace(current, steps=tuple(s for s in current.steps if not (s.spec is not None and s.spec.checks)))

    def apply(
        self,
        loaded: LoadedProfile,
        max_rounds: int = DEFAULT_ROUNDS,
        rehash: bool = False,
        admit: Callable[[Plan], None] | None = None,
        check: Check | None = None,
    ) -> ApplyResult:
        """Converge; `rehash` applies to the first observation only (what it finds missing is fetched again).
        `admit(plan)` sees each round's plan before any of its steps runs, and may refuse it (raise). `check`
        (verify) is what a step that `checks` runs (a launch an earlier apply left unverified); this apply's own
        launch is checked by the caller (`apply_checked`)."""
        try:
            return self._apply(loaded, max_rounds, rehash, admit, check)
        finally:
            if self._release_after_apply:
                self._release_held()

    def _apply(
        self,
        loaded: LoadedProfile,
        max_rounds: int,
        rehash: bool,
        admit: Callable[[Plan], None] | None,
        check: Check | None,
    ) -> ApplyResult:
        ports = self.ports.verifying(check)
        result = ApplyResult()
        self._down = False
        for round_no in range(1, max_rounds + 1):
            current = self.plan(loaded, rehash=rehash and round_no == 1)
            result.rounds, result.final = round_no, current
            steps = self._runnable(current.changes, result, ports)
            if not steps:
                self._keep_rebuilt(current)
                result.final = self._settled(current, result)
                return result
            if admit is not None:
                admit(current)
            self._keep_rebuilt(current)  # once admitted: a refused plan (a declined prompt) writes nothing
            self._execute(steps, result, ports)
        final = self.plan(loaded)
        result.final = self._settled(final, result)
        pending_steps = self._runnable(final.changes, result, ports)
        if pending_steps:
            pending = tuple(f"{s.kind} {s.target}: {s.reason}" for s in pending_steps)
            raise ConvergenceError(f"not converged after {max_rounds} rounds:\n  " + "\n  ".join(pending), pending)
        return result

    def _keep_rebuilt(self, current: Plan) -> None:
        """Write the records this plan rebuilt from the host on its NOOP steps (a changing step's executor writes
        its own). A record that cannot be written (a full state dir) only costs the next plan a re-read: a warning,
        never the apply's failure."""
        for step in current.steps:
            if step.changes or step.spec is None:
                continue
            for key, record in step.spec.rebuilt_records():
                try:
                    self.ports.state.write(key, record)
                except OSError as exc:
                    self.reporter.event(
                        "warning",
                        record=key,
                        error=f"{exc.filename}: {exc.strerror}",
                        consequence="the next plan rebuilds it again",
                    )
                    continue
                self.reporter.event("recorded", what="rebuilt record", record=key)

    def apply_or_revert(
        self,
        loaded: LoadedProfile,
        check: Callable[[], None] | None = None,
        max_rounds: int = DEFAULT_ROUNDS,
        rehash: bool = False,
        run: Callable[[Check | None], ApplyResult] | None = None,
        admit: Callable[[Plan], None] | None = None,
    ) -> ApplyResult:
        """Apply (or `run(check)`: a saved plan); then `check` (verify). On success record the profile as the last
        good one. When the gate, the load or the check fails, relaunch the last good profile and re-raise.
        A `<= verify` step (a launch an earlier apply left unverified) runs `check` too.
        Either way the apply record (`apply_key`: date, result, converged fingerprint, reverts) says how it ended."""
        self._reverted = False
        # Held clients wait through the check (verify) and a revert: released below, to the server that then runs.
        self._release_after_apply = False
        try:
            result = self._apply_or_revert(loaded, check, max_rounds, rehash, run, admit)
        except Kimik3Error as failure:
            self._release_held()  # before the record: the clients first
            self._record_apply(loaded.profile.name, failure)
            raise
        finally:
            self._release_after_apply = True
            self._release_held()
        self._record_apply(loaded.profile.name, None)
        return result

    def _record_apply(self, name: str, failure: Kimik3Error | None) -> None:
        # A statistic, read and written: neither a damaged state dir nor a dockerd gone past its retry may turn a
        # converged apply into a failure, or replace a failure's own message (issue 30: "a statistic is never
        # worth failing an apply for").
        try:
            previous = self.ports.state.read(apply_key(name)) or {}
        except (Kimik3Error, OSError):
            previous = {}
        try:
            inspect = self.ports.docker.inspect_container(name) if failure is None else None
        except (Kimik3Error, OSError):
            inspect = None
        now = self.ports.clock.now().isoformat(timespec="seconds")
        before = _count(previous.get("reverts"))
        # Since when `reverts` counts: kept from the record; from now when the count (re)starts at 0 (an earlier
        # count of 0 holds from any date); unknown (None) for a count a kimik3 without this field left.
        since = previous.get("reverts_since")
        since = since if isinstance(since, str) and before else now if before == 0 else None
        from kimik3_reconciler.steps.statistic import write_statistic  # an apply's end only

        # A statistic (the exporter's last apply): a full state dir must not turn an apply's end into exit 8.
        write_statistic(
            self.ports.state,
            apply_key(name),
            {
                "date": now,
                "result": "ok" if failure is None else "failed",
                # Whole: a first line cut at 300 characters kept "the host gate refuses this profile:" without the port.
                "error": None if failure is None else str(failure),
                # What converged: the exporter's "converged" is this fingerprint running and healthy.
                "fingerprint": parse_container(inspect).fingerprint if inspect else None,
                "reverted": self._reverted,  # this apply relaunched the last good profile (`reverts` is the total)
                "reverts": before + (1 if self._reverted else 0),
                "reverts_since": since,
            },
            self.reporter,
        )

    def _apply_or_revert(
        self,
        loaded: LoadedProfile,
        check: Callable[[], None] | None,
        max_rounds: int,
        rehash: bool,
        run: Callable[[Check | None], ApplyResult] | None,
        admit: Callable[[Plan], None] | None,
    ) -> ApplyResult:
        name = loaded.profile.name
        last_good = {
            "text": loaded.text,
            "source": loaded.source,
            "base_dir": str(self.base_dir.resolve()),
            "date": self.ports.clock.now().isoformat(timespec="seconds"),
        }
        # The records of launched workers and cluster members (one entry each, one form: steps/workers.py).
        self._closing = (last_good, len(loaded.profile.workers) + len(node_hosts(loaded.profile)))
        try:
            try:
                try:
                    # The check goes with this apply only: the revert below must never verify against the failing
                    # profile (apply_checked hands it to this apply's steps on a copy of the ports).
                    result = self.apply_checked(loaded, check, max_rounds, rehash, run, admit)
                finally:
                    self._closing = (None, 0)  # a revert writes its own records: nothing of this apply's is owed
            except OSError as exc:  # a full or read-only state dir, named as the CLI names it (exit 8)
                raise LocalFileError.from_os_error(exc) from None
        except (LoadFailed, VerifyFailed) as failure:  # GateFailed and SmokeFailed are LoadFailed
            last = self.ports.state.read(last_good_key(name))
            if last is None or last.get("text") == loaded.text:
                raise
            self._revert(loaded, failure, last, max_rounds)
        except Kimik3Error as failure:
            if not self._down:
                raise  # nothing this apply stopped is left stopped: the host serves as it did
            # Any other failure after a server was taken down (a full state dir, dockerd, an image tag): an
            # operator woken at night wants a server answering, so the last good profile is brought back, even
            # the same text (the failure was the host's, not the profile's).
            last = self.ports.state.read(last_good_key(name))
            if last is None:
                raise type(failure)(
                    f"{failure}\nno server of {name} runs now, and no last good profile is "
                    "recorded to bring back: apply again once the cause is fixed"
                ) from None
            self._revert(loaded, failure, last, max_rounds)
        # Converged: every worker the profile names is recorded (also one an older kimik3 launched), so a
        # worker it drops later is removed rather than left listening.
        from kimik3_reconciler.steps.workers import remember_workers  # an apply's end only

        try:
            remember_workers(
                self.ports.state,
                name,
                tuple((docker_host(w), w.container_name(name)) for w in loaded.profile.workers),
                converged=True,
            )
            # And every member: an entry of one under a Docker URL the profile moved (same daemon) goes.
            remember_workers(
                self.ports.state,
                name,
                node_members(loaded.profile),
                converged=True,
                key=cluster_members_key(name),
            )
            # Also when a converged apply finds another text recorded: its own last-good write failed (a full
            # state dir, issue 30), and a later failing apply would otherwise revert to the older profile.
            if result.changed or (self.ports.state.read(last_good_key(name)) or {}).get("text") != loaded.text:
                self.ports.state.write(
                    last_good_key(name), {**last_good, "date": self.ports.clock.now().isoformat(timespec="seconds")}
                )
        except OSError as exc:  # room was checked before any server went down: another writer took it since
            raise LocalFileError(
                f"{LocalFileError.from_os_error(exc)}\n{name} runs and answers (verified where "
                "asked), but this apply could not record it as the last good profile: a later "
                "failing apply would bring back an older one. Free space and apply again"
            ) from None
        return result

    def _revert(self, loaded: LoadedProfile, failure: Kimik3Error, last: dict, max_rounds: int) -> None:
        """Bring back the last good profile `last` after `failure`, then raise `failure` saying so (or that the
        revert failed too)."""
        self.reporter.event("revert", to=last.get("source"), recorded=last.get("date"), reason=str(failure)[:200])
        from kimik3_reconciler.model.profile_source import parse_profile  # pydantic: only when reverting

        try:
            # Its relative paths (build.archive, patches, api_key_file) are relative to *its* folder.
            reverting = Orchestrator(
                self.ports, self.reporter, Path(last.get("base_dir") or self.base_dir), self.dockerfile
            )
            reverting.restoring = True  # no room check: bringing a server back is what the room was kept for
            reverting.apply(
                parse_profile(last["text"], source=f"last good {loaded.profile.name} ({last.get('date')})"), max_rounds
            )
        except OSError as exc:
            revert_failure: Exception = LocalFileError.from_os_error(exc)
        except Kimik3Error as exc:
            revert_failure = exc
        else:
            self._reverted = True
            # The failed candidate's owed verify went with it: the record would name a launch that no longer runs
            # (the reverted launch is the last good profile, verified when it was applied).
            self.ports.state.delete(unverified_key(loaded.profile.name))
            raise type(failure)(f"{failure}\nreverted to the last good profile (recorded {last.get('date')})") from None
        raise type(failure)(
            f"{failure}\nthe revert to the last good profile (recorded {last.get('date')}) failed too: {revert_failure}"
        ) from None

    def apply_checked(
        self,
        loaded: LoadedProfile,
        check: Check | None,
        max_rounds: int = DEFAULT_ROUNDS,
        rehash: bool = False,
        run: Callable[[Check | None], ApplyResult] | None = None,
        admit: Callable[[Plan], None] | None = None,
    ) -> ApplyResult:
        """Apply (or `run(check)`) with `check`, then run `check` on a change unless a step of the apply ran it
        already; a passing check clears the launch's `unverified/` record. No revert, no last-good record
        (apply_or_revert adds them; a tune candidate is never the profile to come back to)."""
        result = run(check) if run is not None else self.apply(loaded, max_rounds, rehash, admit, check)
        checked = any(s.spec.checks for s in result.executed)
        if check is not None and result.changed and not checked:
            check()
            self.ports.state.delete(unverified_key(loaded.profile.name))
        return result

    def prune(self, loaded: LoadedProfile, execute_steps: bool = True) -> Plan:
        pruning = check_executable(plan_prune(loaded.profile, self.observe(loaded)))
        if execute_steps:
            for step in pruning.changes:
                execute(step, self.ports, self.reporter)
        return pruning

    def destroy(
        self, loaded: LoadedProfile, *, images: bool, model: bool, slots: bool = False, execute_steps: bool = True
    ) -> Plan:
        """Remove what the profile created, and the records that would bring it back (the revert target). Refused
        (exit 3, nothing removed) while a live `kimik3 reconcile` loop keeps this profile converged: its next pass
        would launch it again."""
        from kimik3_reconciler.locking import live_loop  # destroy only

        found = live_loop(self.ports, loaded.profile.name)
        if found is not None:
            holder, record = found
            raise PlanError(
                f"a reconcile loop keeps {loaded.profile.name} converged: `kimik3 reconcile "
                f"{record.get('file')}` (pid {holder.pid} on {holder.host}, last pass "
                f"{record.get('last_pass')}); its next pass would launch what destroy removes. Nothing was "
                "removed: stop the loop (or the timer or unit that runs it) first, then destroy"
            )
        teardown = check_executable(
            plan_destroy(loaded.profile, self.observe(loaded), images=images, model=model, slots=slots)
        )
        if execute_steps:
            for step in teardown.changes:
                execute(step, self.ports, self.reporter)
        return teardown


def _launched(result: ApplyResult) -> bool:
    """This apply (re)launched or started the container: it verifies that launch itself, at its end."""
    return any(s.spec.starts_server for s in result.executed)


def _count(value: object) -> int:
    """A count read back from a state record: one that is not a whole number >= 0 (edited, torn) restarts at 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
