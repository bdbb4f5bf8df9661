"""Taking the per-host lock around every change (apply, destroy, prune, each reconcile pass): the state dir's
and the host-wide one (/run/lock/kimik3.lock) together, so kimik3s with other state dirs are kept out too.

A second kimik3 waits up to its `--lock-timeout` (0 = fail at once), saying every few seconds whom it
waits for, then fails with `LockHeld` (exit 5) naming the holder. A record left by a holder whose
process is gone is taken over with a message (the kernel already freed its flock). `plan`, `status`
and `verify` change nothing and never take it.

With RPC workers or cluster nodes the same holder (one lock id) also takes each of those hosts' lock
(adapters/worker_lock.py), after this host's: the profile's workers, its cluster's nodes and the recorded workers
and nodes it dropped, once per Docker, in their Docker's address order (the same for every run). Each is named as the profile names it (`OtherHost`): an RPC worker,
or a cluster node with its Docker's field (`vllm.cluster.nodes[1].docker`).
`force_unlock` removes a lock id wherever it is the current one, here and on the other hosts it is given.
"""

from __future__ import annotations

import datetime
import os
import socket
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from kimik3_reconciler.errors import InputError, Kimik3Error, LockHeld, PlanError
from kimik3_reconciler.model.host_lock import LockHolder, worker_unlock_by_hand
from kimik3_reconciler.model.records import cluster_members_key, reconcile_loop_key, rpc_workers_key
from kimik3_reconciler.model.specs import DockerHost
from kimik3_reconciler.ports import ClockPort, LockPort, Ports

Say = Callable[..., None]  # reporter.event(name, **fields)

POLL_S = 0.2  # flock has no timeout: try again this often while waiting
LOOP_GRACE_S = 60.0  # a loop whose process is gone (a timer's `--once`) counts while passes keep coming
PROGRESS_EVERY_S = 10.0  # a waiting apply says whom it waits for this often


@dataclass(frozen=True)
class OtherHost:
    """A host a run locks besides its own, as the profile names it: an RPC worker's Docker, or a cluster node's."""

    host: DockerHost
    node: bool = False  # a cluster node's (`vllm.cluster.nodes[i]`), not an RPC worker's (`rpc.workers[i]`)
    field: str = ""  # the profile's field of a node's Docker (`vllm.cluster.nodes[1].docker`); "" once dropped
    dropped: bool = False  # the profile no longer names it: its recorded rpc-server or member is removed there

    @property
    def role(self) -> str:
        return "cluster node" if self.node else "rpc worker"

    @property
    def called(self) -> str:
        """`cluster node gpu2 (vllm.cluster.nodes[0].docker)`, `rpc worker w1`: its word, name and field."""
        return f"{self.role} {self.host.name}" + (f" ({self.field})" if self.field else "")

    def named(self) -> str:
        """`cluster node gpu2 (vllm.cluster.nodes[0].docker, ssh://kimik3@10.0.0.2)`: its word, name, field, Docker."""
        return f"{self.role} {self.host.name} ({', '.join(filter(None, (self.field, self.host.url)))})"

    def event_fields(self) -> dict[str, str]:
        """What a lock event says of it (`worker`: an RPC worker's name; `node` and `field`: a cluster node's)."""
        if not self.node:
            return {"worker": self.host.name}
        return {"node": self.host.name, **({"field": self.field} if self.field else {})}


def live_loop(ports: Ports, profile: str) -> tuple[LockHolder, dict] | None:
    """The `kimik3 reconcile` loop that keeps `profile` converged (its holder and record, reconcile/<profile>.json),
    while it is live: its process runs, or (a timer's `--once`, another host) its passes keep coming."""
    record = ports.state.read(reconcile_loop_key(profile))
    holder = LockHolder.from_json(record.get("holder") or {}) if record else None
    if record is None or holder is None:
        return None
    if ports.lock is not None and ports.lock.alive(holder):
        return holder, record
    try:
        last = datetime.datetime.fromisoformat(str(record.get("last_pass")))
        interval = float(record.get("interval_s") or 0)
    except (TypeError, ValueError):
        return None
    return (holder, record) if (ports.clock.now() - last).total_seconds() <= 2 * interval + LOOP_GRACE_S else None


def new_holder(operation: str, profile: str, clock: ClockPort) -> LockHolder:
    return LockHolder(
        id=uuid.uuid4().hex[:12],
        operation=operation,
        profile=profile,
        pid=os.getpid(),
        host=socket.gethostname(),
        started=clock.now().isoformat(timespec="seconds"),
    )


def acquire(
    lock: LockPort,
    clock: ClockPort,
    holder: LockHolder,
    timeout_s: float,
    say: Say,
    other: OtherHost | None = None,
) -> None:
    """Take the lock for `holder`, waiting at most `timeout_s`; LockHeld naming the holder after that.
    `other`: the lock is that other host's (an RPC worker's or a cluster node's Docker), not this host's."""
    start = clock.monotonic()
    next_progress = start
    where = other.event_fields() if other is not None else {}
    while True:
        attempt = lock.try_acquire(holder)
        if attempt.acquired:
            if attempt.note is not None:
                say("lock-host-wide-unavailable", why=attempt.note)
            if attempt.unrecorded is not None:
                say(
                    "lock-record-unwritten",
                    why=attempt.unrecorded,
                    consequence="the lock holds; a kimik3 that waits for it cannot name this one",
                )
            if attempt.holder is not None:
                say(
                    "lock-taken-over",
                    stale=attempt.holder.describe(),
                    **where,
                    why="its process is gone (the kernel released its lock); its run did not finish",
                )
            return
        now = clock.monotonic()
        waited = now - start
        if waited >= timeout_s:
            raise LockHeld(
                _held_message(attempt.holder, waited, timeout_s, other),
                attempt.holder.id if attempt.holder else None,
            )
        if now >= next_progress:
            say(
                "lock-wait",
                holder=attempt.holder.describe() if attempt.holder else "another kimik3",
                **where,
                waited_s=round(waited),
                timeout_s=round(timeout_s),
            )
            next_progress = now + PROGRESS_EVERY_S
        clock.sleep(min(POLL_S, timeout_s - waited))


def _acquire_other(ports: Ports, holder: LockHolder, timeout_s: float, say: Say, other: OtherHost) -> LockPort:
    host = other.host
    if ports.worker_lock is None:
        raise InputError(f"{other.role} {host.name}: no lock port for worker hosts is wired")
    lock = ports.worker_lock(host)
    try:
        acquire(lock, ports.clock, holder, timeout_s, say, other)
    except LockHeld:
        raise
    except Kimik3Error as exc:
        # Its Docker does not answer: nothing can be changed there, and nothing is changed anywhere (exit 3, as
        # the planner refuses an unreachable worker), the host named as the profile names it.
        gone = ""
        if other.dropped and not other.node:
            gone = (
                f"\n  the profile no longer names this worker (state record {rpc_workers_key(holder.profile)}): "
                "bring its Docker back, or remove its rpc-server there by hand and delete its entry from that "
                'record (docs/operations.md, "Dropping a worker")'
            )
        elif other.dropped:
            gone = (
                f"\n  the profile no longer names this node (state record {cluster_members_key(holder.profile)}): "
                f"bring its Docker back, or remove its member there by hand (`docker rm -f {holder.profile}-node-"
                f"{host.name}`) and delete its entry from that record"
            )
        raise PlanError(f"{other.called}: cannot take the apply lock in its Docker at {host.url}: {exc}{gone}") from exc
    return lock


@contextmanager
def holding(
    ports: Ports, say: Say, operation: str, profile: str, timeout_s: float, others: tuple[OtherHost, ...] = ()
) -> Iterator[LockHolder | None]:
    """The lock held around the block (this host's, then each other host's: the profile's RPC workers, its cluster's
    nodes and the recorded ones it dropped, in their Docker's address order), released however the block ends."""
    if ports.lock is None:  # fakes without a lock port: orchestrator unit tests that do not test locking
        yield None
        return
    holder = new_holder(operation, profile, ports.clock)
    acquire(ports.lock, ports.clock, holder, timeout_s, say)
    taken: list[LockPort] = []
    try:
        # A worker converged by two kimik3 at once (two main hosts sharing it) would race on its rpc-server,
        # and a dropped worker's removal is a change there too: every host a run changes is locked, once per Docker
        # (two workers on one host share its lock), in one order for every run: by its Docker's address, never the
        # profile's order (two runs that listed two shared hosts the other way round each held one and waited on
        # the other until both timed out, exit 5, nothing applied).
        for other in sorted(one_per_docker(others), key=_docker_key):
            taken.append(_acquire_other(ports, holder, timeout_s, say, other))
        yield holder
    finally:
        for lock in reversed(taken):
            lock.release(holder)
        ports.lock.release(holder)


def one_per_docker(others: Sequence[OtherHost]) -> tuple[OtherHost, ...]:
    """The first of the hosts on each Docker (two workers on one host share its lock), in order: a host the profile
    names comes before a dropped one, so a Docker it still uses is never called dropped."""
    seen: dict[tuple[str, str], OtherHost] = {}
    for other in others:
        seen.setdefault(_docker_key(other), other)
    return tuple(seen.values())


def _docker_key(other: OtherHost) -> tuple[str, str]:
    return other.host.url, other.host.tls_dir or ""


def force_unlock(
    lock: LockPort, lock_id: str, others: Sequence[tuple[OtherHost, LockPort]] = (), hint: str = ""
) -> str:
    """Remove lock `lock_id` here and on each other host (an RPC worker's, a cluster node's) where it is the current
    one (a run holds one id on every host it locks); says what was removed and whether its holder runs. A host whose
    Docker does not answer is named with the commands that remove it there by hand. `hint`: added when the id is
    nowhere."""
    record, held = lock.holder()
    said: list[str] = []
    if record is not None and record.id == lock_id:
        lock.break_lock()
        said.append(_removed(lock, record, held, ""))
    current, unreachable = [], []
    for other, other_lock in _unique(others):
        try:
            found, alive = other_lock.holder()
            if found is not None and found.id == lock_id:
                other_lock.break_lock()
                said.append(_removed(other_lock, found, alive, f" on {other.named()}"))
            elif found is not None:
                current.append(f"{other.called}: {found.describe()}")
        except Kimik3Error as exc:
            unreachable.append(
                f"{other.called}: cannot reach its Docker at {other.host.url} ({exc}); "
                f"if lock {lock_id} is there: {worker_unlock_by_hand(other.host, lock_id)}"
            )
    if not said:
        if record is None:
            state = "is held, but its holder has not written its record yet; try again" if held else "is not locked"
            here = f"no lock {lock_id}: the host {state}"
        else:
            here = f"lock id {lock_id!r} is not the current lock; the current one is {record.describe()}"
        raise InputError("\n  ".join((here, *current, *unreachable, *([hint] if hint else []))))
    return "\n".join((*said, *unreachable))


def _unique(others: Sequence[tuple[OtherHost, LockPort]]) -> list[tuple[OtherHost, LockPort]]:
    locks = dict(others)
    return [(other, locks[other]) for other in one_per_docker(tuple(other for other, _ in others))]


def _removed(lock: LockPort, record: LockHolder, held: bool, where: str) -> str:
    if not held:
        return f"removed the stale lock record {record.id}{where} ({record.describe()}): its process is gone"
    if lock.alive(record):
        return (
            f"removed lock {record.id}{where} ({record.describe()}); pid {record.pid} still runs on this host "
            f"and may still change it: stop it (kill {record.pid}) if it is hung"
        )
    return f"removed lock {record.id}{where} ({record.describe()})"


def _held_message(holder: LockHolder | None, waited_s: float, timeout_s: float, other: OtherHost | None) -> str:
    # No record: one not written yet, or another user's kimik3, which may lock the host-wide file (mode 0644)
    # but not write it.
    who = (
        holder.describe()
        if holder
        else (
            "another kimik3 (no record: not written yet, or another user's kimik3, "
            "which cannot write the host-wide lock file)"
        )
    )
    waited = "did not wait (--lock-timeout 0)" if timeout_s <= 0 else f"waited {waited_s:.0f}s (--lock-timeout)"
    # Another host's lock is found through the profile's workers and nodes: force-unlock needs the profile file there.
    unlock = f"kimik3 force-unlock {holder.id}" + (" FILE (FILE: this profile)" if other else "") if holder else ""
    hint = f"; if that process is hung: {unlock}" if holder else ""
    place = other.named() if other else "the host"
    return (
        f"{place} is locked by another kimik3: {who}; {waited}. Nothing was changed. Retry when it is "
        f"done, or wait for it with --lock-timeout DURATION{hint}"
    )
