"""Taking the per-host lock around every change (apply, destroy, prune, each reconcile pass): the state dir's
and the host-wide one (/run/lock/kimik3.lock) together, so kimik3s with other state dirs are kept out too.

A second kimik3 waits up to its `--lock-timeout` (0 = fail at once), saying every few seconds whom it
waits for, then fails with `LockHeld` (exit 5) naming the holder. A record left by a holder whose
process is gone is taken over with a message (the kernel already freed its flock). `plan`, `status`
and `verify` change nothing and never take it.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from kimik3_reconciler.errors import InputError, LockHeld
from kimik3_reconciler.model.host_lock import LockHolder
from kimik3_reconciler.model.specs import DockerHost
from kimik3_reconciler.ports import ClockPort, LockPort, Ports

Say = Callable[..., None]  # reporter.event(name, **fields)

POLL_S = 0.2  # flock has no timeout: try again this often while waiting
PROGRESS_EVERY_S = 10.0  # a waiting apply says whom it waits for this often


def new_holder(operation: str, profile: str, clock: ClockPort) -> LockHolder:
    return LockHolder(id=uuid.uuid4().hex[:12], operation=operation, profile=profile, pid=os.getpid(),
                      host=socket.gethostname(), started=clock.now().isoformat(timespec="seconds"))


def acquire(lock: LockPort, clock: ClockPort, holder: LockHolder, timeout_s: float, say: Say) -> None:
    """Take the lock for `holder`, waiting at most `timeout_s`; LockHeld naming the holder after that."""
    start = clock.monotonic()
    next_progress = start
    while True:
        attempt = lock.try_acquire(holder)
        if attempt.acquired:
            if attempt.note is not None:
                say("lock-host-wide-unavailable", why=attempt.note)
            if attempt.holder is not None:
                say("lock-taken-over", stale=attempt.holder.describe(),
                    why="its process is gone (the kernel released its lock); its run did not finish")
            return
        now = clock.monotonic()
        waited = now - start
        if waited >= timeout_s:
            raise LockHeld(_held_message(attempt.holder, waited, timeout_s),
                           attempt.holder.id if attempt.holder else None)
        if now >= next_progress:
            say("lock-wait", holder=attempt.holder.describe() if attempt.holder else "another kimik3",
                waited_s=round(waited), timeout_s=round(timeout_s))
            next_progress = now + PROGRESS_EVERY_S
        clock.sleep(min(POLL_S, timeout_s - waited))


@contextmanager
def holding(ports: Ports, say: Say, operation: str, profile: str, timeout_s: float,
            workers: tuple[DockerHost, ...] = ()) -> Iterator[LockHolder | None]:
    """The lock held around the block (this host's, then each RPC worker host's, in profile order), released
    however the block ends."""
    if ports.lock is None:  # fakes without a lock port: engine unit tests that do not test locking
        yield None
        return
    holder = new_holder(operation, profile, ports.clock)
    acquire(ports.lock, ports.clock, holder, timeout_s, say)
    taken: list[LockPort] = []
    try:
        for host in dict.fromkeys(workers):  # one lock per worker Docker
            if ports.worker_lock is None:
                raise InputError(f"rpc worker {host.name}: no lock port for worker hosts is wired")
            lock = ports.worker_lock(host)
            # A worker converged by two kimik3 at once (two main hosts sharing it) would race on its
            # rpc-server: every host a run changes is locked, always in the same order.
            acquire(lock, ports.clock, holder, timeout_s, say)
            taken.append(lock)
        yield holder
    finally:
        for lock in reversed(taken):
            lock.release(holder)
        ports.lock.release(holder)


def force_unlock(lock: LockPort, lock_id: str) -> str:
    """Remove lock `lock_id` (it must be the current one); says what was removed and whether its holder runs."""
    record, held = lock.holder()
    if record is None:
        state = "is held, but its holder has not written its record yet; try again" if held else "is not locked"
        raise InputError(f"no lock {lock_id}: the host {state}")
    if record.id != lock_id:
        raise InputError(f"lock id {lock_id!r} is not the current lock; the current one is {record.describe()}")
    lock.break_lock()
    if not held:
        return f"removed the stale lock record {lock_id} ({record.describe()}): its process is gone"
    if lock.alive(record):
        return (f"removed lock {lock_id} ({record.describe()}); pid {record.pid} still runs on this host and may "
                f"still change it: stop it (kill {record.pid}) if it is hung")
    return f"removed lock {lock_id} ({record.describe()})"


def _held_message(holder: LockHolder | None, waited_s: float, timeout_s: float) -> str:
    who = holder.describe() if holder else "another kimik3 (its record is not written yet)"
    waited = "did not wait (--lock-timeout 0)" if timeout_s <= 0 else f"waited {waited_s:.0f}s (--lock-timeout)"
    hint = f"; if that process is hung: kimik3 force-unlock {holder.id}" if holder else ""
    return (f"the host is locked by another kimik3: {who}; {waited}. Nothing was changed. Retry when it is "
            f"done, or wait for it with --lock-timeout DURATION{hint}")
