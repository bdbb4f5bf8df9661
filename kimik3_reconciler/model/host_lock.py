"""The per-host lock's record: who holds it (pure values; adapters/host_lock.py keeps it in the state dir and in
the host-wide lock file, adapters/worker_lock.py in an RPC worker's Docker)."""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass
from typing import Any

from kimik3_reconciler.model.specs import DockerHost

LOCK_FILE = "lock/host.lock"  # the file kimik3 flocks (never removed, except by force-unlock)
LOCK_RECORD = "lock/holder.json"  # the JSON beside it: who holds the flock
WORKER_LOCK_CONTAINER = "kimik3-host-lock"  # on a worker host: a never-started container, its name the lock
WORKER_HOLDER_LABEL = "kimik3.lock.holder"  # that container's label: the holder's JSON


def docker_cli(host: DockerHost) -> str:
    """The `docker` command line that reaches a worker's Docker as kimik3 does (for a message to the operator)."""
    if host.tls_dir:
        certs = {
            flag: shlex.quote(f"{host.tls_dir.rstrip('/')}/{name}")
            for flag, name in (("--tlscacert", "ca.pem"), ("--tlscert", "cert.pem"), ("--tlskey", "key.pem"))
        }
        return f"docker -H {shlex.quote(host.url)} --tlsverify " + " ".join(f"{f} {p}" for f, p in certs.items())
    return f"docker -H {shlex.quote(host.url)}"


def worker_unlock_by_hand(host: DockerHost, lock_id: str) -> str:
    """What an operator runs on a worker kimik3 cannot reach to remove lock `lock_id` there (after checking that
    the label names that lock: another kimik3 may have taken the worker since)."""
    cli = docker_cli(host)
    label = shlex.quote(f'{{{{index .Config.Labels "{WORKER_HOLDER_LABEL}"}}}}')
    return (
        f"check that `{cli} inspect --format {label} {WORKER_LOCK_CONTAINER}` names lock id {lock_id}, "
        f"then `{cli} rm {WORKER_LOCK_CONTAINER}`"
    )


@dataclass(frozen=True)
class LockHolder:
    """One kimik3 process changing the host: what it does, to which profile, since when."""

    id: str
    operation: str  # apply | destroy | prune | reconcile
    profile: str
    pid: int
    host: str
    started: str  # ISO 8601, UTC

    def describe(self) -> str:
        return (
            f"{self.operation} of {self.profile} by pid {self.pid} on {self.host} "
            f"since {self.started} (lock id {self.id})"
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LockHolder | None:
        """None for a record that is not one of ours (torn, hand-edited): it names nobody."""
        try:
            return cls(
                id=str(data["id"]),
                operation=str(data["operation"]),
                profile=str(data["profile"]),
                pid=int(data["pid"]),
                host=str(data["host"]),
                started=str(data["started"]),
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class LockAttempt:
    """The answer of one non-blocking try.

    acquired: `holder` is None, or the record of a holder whose process is gone (taken over: stale).
    not acquired: `holder` is who holds it (None when its record cannot be read yet).
    `note`: acquired with less than asked (the host-wide lock could not be used: the state dir's alone).
    `unrecorded`: acquired, but the holder's record could not be written (why): others waiting see no name.
    """

    acquired: bool
    holder: LockHolder | None = None
    note: str | None = None
    unrecorded: str | None = None
