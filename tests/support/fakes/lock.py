"""A worker host's apply lock in memory (adapters/worker_lock.py keeps it in that host's Docker): one record per
Docker URL, shared by every handle on it, as the lock container is; `down` URLs raise as an unreachable Docker."""

from __future__ import annotations

from kimik3_reconciler.errors import TransientError
from kimik3_reconciler.model.host_lock import LockAttempt, LockHolder
from kimik3_reconciler.model.specs import DockerHost


class FakeWorkerLocks:
    """`ports.worker_lock`: FakeWorkerLocks()(host) is that host's LockPort; `taken` logs acquisitions in order."""

    def __init__(self, down: tuple[str, ...] = ()) -> None:
        self.records: dict[str, LockHolder] = {}
        self.down = set(down)
        self.taken: list[str] = []
        self.alive = True  # what alive() answers for a holder (a foreign host's: the adapter can't tell)

    def __call__(self, host: DockerHost) -> FakeWorkerLock:
        return FakeWorkerLock(self, host.url)


class FakeWorkerLock:
    def __init__(self, locks: FakeWorkerLocks, url: str) -> None:
        self.locks, self.url = locks, url

    def _reach(self) -> None:
        if self.url in self.locks.down:
            raise TransientError(f"ssh: connect to host {self.url}: Connection refused")

    def try_acquire(self, holder: LockHolder) -> LockAttempt:
        self._reach()
        current = self.locks.records.get(self.url)
        if current is not None and current.id != holder.id:
            return LockAttempt(acquired=False, holder=current)
        self.locks.records[self.url] = holder
        self.locks.taken.append(self.url)
        return LockAttempt(acquired=True)

    def release(self, holder: LockHolder) -> None:
        current = self.locks.records.get(self.url)
        if current is not None and current.id == holder.id:
            del self.locks.records[self.url]

    def holder(self) -> tuple[LockHolder | None, bool]:
        self._reach()
        current = self.locks.records.get(self.url)
        return current, current is not None and self.locks.alive

    def break_lock(self) -> None:
        self._reach()
        self.locks.records.pop(self.url, None)

    def alive(self, holder: LockHolder) -> bool | None:
        return None  # a holder of another host: never guessed
