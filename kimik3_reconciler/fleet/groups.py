"""A llama.cpp main server with its RPC workers is one replica (a group); PURE (values in, values out).

A fleet host whose effective profile names `rpc.workers` is a group's main host: the router sees only its main
server, the rollout takes it out, applies there (its `kimik3 apply` converges the workers through their own Docker)
and puts it back as one replica. Its workers are hosts too, but no replica: a worker host may lend its devices to
one main server only (rpc-server serves one client at a time) and must not be a replica itself (llama-server and
rpc-server would share its devices, and its worker's failure would take a replica down with it).

A worker is dead when its rpc-server is not there to answer: llama.cpp's RPC has no recovery of its own (the main
server fails on its next call to the worker, and a new rpc-server holds none of the tensors the main server placed
there), so the whole group must leave the router and be re-converged. Read from the main host's own
`kimik3 status --json` (its `workers`: each seen through the worker's Docker)."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from kimik3_reconciler.fleet.values import FleetHost
from kimik3_reconciler.model.profile import RpcWorker

_LOOPBACK = ("127.0.0.1", "::1", "localhost", "loopback")


def worker_address(worker: RpcWorker) -> str:
    """The host a worker runs on: its Docker URL's host (ssh://user@host:port, tcp://host:port)."""
    return (urlsplit(worker.docker).hostname or worker.docker).lower()


def _worker_names(worker: RpcWorker) -> set[str]:
    """Every name the worker's host goes by here: its Docker's host and the address rpc-server binds."""
    names = {worker_address(worker)}
    if worker.bind not in _LOOPBACK:
        names.add(worker.bind.lower())
    return names


def _on_its_main_host(worker: RpcWorker) -> bool:
    """The worker's Docker is dialled from its main host: a loopback one (127.0.0.0/8, ::1, localhost) is that host's
    own daemon, whichever host it is."""
    address = worker_address(worker)
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:  # a name: its host is whatever it resolves to
        return False


def _replica_names(host: FleetHost) -> set[str]:
    """Every name a replica host goes by: its inventory name, its SSH address, the address its server binds."""
    names = {host.name.lower(), host.address.lower()}
    if host.profile.serve.host not in ("loopback", "tailscale"):
        names.add(host.profile.serve.host.lower())
    return names


@dataclass(frozen=True)
class Conflict:
    """A worker that is not only its group's: `host` names the group (main host), `index` the worker in its
    `rpc.workers`; `message` says what else the worker's host is."""

    host: str
    index: int
    message: str


def conflicts(hosts: Sequence[FleetHost]) -> tuple[Conflict, ...]:
    """Workers on a replica host, and workers another group has already (file order: the later one is named)."""
    found: list[Conflict] = []
    owner: dict[str, tuple[str, str]] = {}  # a worker host's name -> (main host, worker name) that has it
    replicas = {name: h.name for h in hosts for name in _replica_names(h)}
    for host in hosts:
        mine = _replica_names(host)
        for index, worker in enumerate(host.profile.workers):
            names = _worker_names(worker)
            if names & mine or _on_its_main_host(worker):
                continue  # the main host lends its own devices too: inside the group
            replica = next((replicas[n] for n in sorted(names) if n in replicas), None)
            if replica is not None:
                found.append(
                    Conflict(
                        host.name,
                        index,
                        f"worker {worker.name} runs on {worker_address(worker)}, which is host {replica}, a replica "
                        "of this fleet: a host is a replica or one group's worker, not both (their servers would "
                        "share its devices, and the worker's failure would take the replica down too); a worker "
                        "host stays in the inventory outside rollout.hosts' group (a group of the main hosts, "
                        "not all)",
                    )
                )
                continue
            taken = next((owner[n] for n in sorted(names) if n in owner and owner[n][0] != host.name), None)
            if taken is not None:
                found.append(
                    Conflict(
                        host.name,
                        index,
                        f"worker {worker.name} runs on {worker_address(worker)}, which is already host {taken[0]}'s "
                        f"worker {taken[1]}: a worker host serves one main server (rpc-server serves one client at "
                        "a time); give each host its own workers in overrides.<host>.rpc.workers",
                    )
                )
                continue
            for n in names:
                owner.setdefault(n, (host.name, worker.name))
    return tuple(found)


@dataclass(frozen=True)
class WorkerState:
    """One worker of a group as its main host's kimik3 sees it: `state` up | dead | unknown, and why."""

    name: str
    endpoint: str  # bind:port, where the main server reaches its rpc-server
    state: str
    why: str = ""

    @property
    def dead(self) -> bool:
        return self.state == "dead"

    def text(self) -> str:
        return f"{self.name} {self.state}" + (f" ({self.why})" if self.why else "")


def worker_endpoint(worker: RpcWorker) -> str:
    return f"[{worker.bind}]:{worker.port}" if ":" in worker.bind else f"{worker.bind}:{worker.port}"


def worker_states(host: FleetHost, status: Mapping[str, Any] | None) -> tuple[WorkerState, ...]:
    """Each of `host`'s workers from its `kimik3 status --json` document (None: the host did not answer)."""
    seen = {w.get("name"): w for w in (status or {}).get("workers") or () if isinstance(w, Mapping)}
    main = ((status or {}).get("container") or {}).get("started_at")
    return tuple(_state(w, seen.get(w.name), main, status is not None) for w in host.profile.workers)


def _moment(stamp: object) -> datetime.datetime | None:
    """Docker's StartedAt (RFC 3339, UTC, a zero fraction dropped: compared as text '.5Z' sorts before 'Z'); None for
    Docker's zero time (never started) or what does not read as a time."""
    if not isinstance(stamp, str) or stamp.startswith("0001-"):
        return None
    try:
        return datetime.datetime.fromisoformat(stamp)
    except ValueError:
        return None


def _state(worker: RpcWorker, fact: Mapping[str, Any] | None, main_started: str | None, answered: bool) -> WorkerState:
    where = worker_endpoint(worker)
    if fact is None:
        return WorkerState(
            worker.name,
            where,
            "unknown",
            "its main host did not answer" if not answered else "not in its main host's status",
        )
    if fact.get("error"):
        # Its Docker does not answer (the host down, ssh refused): the rpc-server may still serve; nothing is known.
        return WorkerState(worker.name, where, "unknown", f"its Docker does not answer: {fact['error']}")
    container = fact.get("container")
    if not container:
        return WorkerState(worker.name, where, "dead", "no rpc-server container")
    if container.get("state") != "running":
        return WorkerState(worker.name, where, "dead", f"rpc-server container {container.get('state')}")
    if fact.get("port_open") is False:
        return WorkerState(worker.name, where, "dead", f"{where} does not accept connections")
    started = _moment(container.get("started_at"))
    main = _moment(main_started)
    if main and started and started > main:
        # A new rpc-server holds none of the tensors the main server placed on the old one.
        return WorkerState(worker.name, where, "dead", "rpc-server restarted after the main server started")
    return WorkerState(worker.name, where, "up")
