"""A replica whose server leans on other hosts is one unit of the fleet (a group); PURE (values in, values out).

Two kinds: a llama.cpp main server with its RPC workers (`rpc.workers`), and a vLLM/SGLang replica over several
hosts (`vllm.cluster` / `sglang.cluster`: the head, this host, and its `nodes`). A fleet host whose effective profile
names either is a group's main host: the router sees only its server, the rollout takes it out, applies there (its
`kimik3 apply` converges the members through their own Docker) and puts it back as one replica. Its members' hosts
are hosts too, but no replica: a member's host belongs to one group only (rpc-server serves one client at a time; a
cluster node's devices hold its head's ranks) and must not be a replica itself (two servers would share its devices,
and the member's failure would take a replica down with it).

A member is dead when it is not there to serve its part: llama.cpp's RPC has no recovery of its own (the main server
fails on its next call to the worker, and a new rpc-server holds none of the tensors the main server placed there);
a cluster node that left (its container gone or restarted, Ray's table says it is not alive) took its ranks with it.
Either way the whole group must leave the router and be re-converged. Read from the main host's own
`kimik3 status --json` (`workers`: each seen through the worker's Docker; `members`: each cluster node the same way;
`ray_alive`: the addresses Ray's node table has a live raylet at, read through the head's container)."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from kimik3_reconciler.fleet.values import FleetHost
from kimik3_reconciler.model.profile import ClusterSpec, Profile, RpcWorker
from kimik3_reconciler.model.profile_rules import FieldPath

_LOOPBACK = ("127.0.0.1", "::1", "localhost", "loopback")
# Why a member's host is its group's only, by kind (said in each refusal).
_ONE_CLIENT = {
    "worker": "rpc-server serves one client at a time",
    "node": "a cluster node runs its head's ranks on its devices",
}


@dataclass(frozen=True)
class Member:
    """One host of a group beside its main host: an RPC worker (`kind` worker) or a cluster node (`kind` node);
    `field`: where the profile writes it, e.g. ("rpc", "workers", 0) or ("vllm", "cluster", "nodes", 0)."""

    name: str
    docker: str
    bind: str
    kind: str
    field: FieldPath
    port: int | None = None  # a worker's rpc-server port; a node's ports are its engine's


def cluster_of(profile: Profile) -> tuple[str, ClusterSpec] | None:
    """(the engine's section, its `cluster`) of a replica over several hosts; None on one host."""
    section = getattr(profile, profile.engine, None) if profile.engine in ("vllm", "sglang") else None
    cluster = getattr(section, "cluster", None)
    return (profile.engine, cluster) if cluster is not None else None


def members(profile: Profile) -> tuple[Member, ...]:
    """The group's other hosts: its RPC workers (in --rpc order) or its cluster nodes (in rank order)."""
    found = [
        Member(w.name, w.docker, w.bind, "worker", ("rpc", "workers", i), w.port) for i, w in enumerate(profile.workers)
    ]
    cluster = cluster_of(profile)
    if cluster is not None:
        section, spec = cluster
        found += [
            Member(n.name, n.docker, n.bind, "node", (section, "cluster", "nodes", i)) for i, n in enumerate(spec.nodes)
        ]
    return tuple(found)


def spans(profile: Profile) -> bool:
    """Whether the replica leans on hosts beside its own (a group)."""
    return bool(members(profile))


def worker_address(worker: RpcWorker | Member) -> str:
    """The host a member runs on: its Docker URL's host (ssh://user@host:port, tcp://host:port)."""
    return (urlsplit(worker.docker).hostname or worker.docker).lower()


def _member_names(member: Member) -> set[str]:
    """Every name the member's host goes by here: its Docker's host and the address it binds."""
    names = {worker_address(member)}
    if member.bind not in _LOOPBACK:
        names.add(member.bind.lower())
    return names


def _on_its_main_host(member: Member) -> bool:
    """The member's Docker is dialled from its main host: a loopback one (127.0.0.0/8, ::1, localhost) is that host's
    own daemon, whichever host it is."""
    address = worker_address(member)
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:  # a name: its host is whatever it resolves to
        return False


def _replica_names(host: FleetHost) -> set[str]:
    """Every name a replica host goes by: its inventory name, its SSH address, the address its server binds (and,
    as a cluster's head, the address its nodes reach it at)."""
    names = {host.name.lower(), host.address.lower()}
    if host.profile.serve.host not in ("loopback", "tailscale"):
        names.add(host.profile.serve.host.lower())
    cluster = cluster_of(host.profile)
    if cluster is not None and cluster[1].bind not in _LOOPBACK:
        names.add(cluster[1].bind.lower())
    return names


def group_hosts(host: FleetHost) -> tuple[str, ...]:
    """The hosts `host`'s replica spans: its own name, then each member's host (as its Docker URL names it)."""
    return (host.name, *(worker_address(m) for m in members(host.profile) if not _on_its_main_host(m)))


@dataclass(frozen=True)
class Conflict:
    """A member that is not only its group's: `host` names the group (main host), `field` the member's `docker`
    in the profile (e.g. ("rpc", "workers", 0, "docker")); `message` says what else the member's host is."""

    host: str
    field: FieldPath
    message: str


def conflicts(hosts: Sequence[FleetHost]) -> tuple[Conflict, ...]:
    """Members on a replica host, and members another group has already (file order: the later one is named)."""
    found: list[Conflict] = []
    owner: dict[str, tuple[str, Member]] = {}  # a member host's name -> (main host, member) that has it
    replicas = {name: h.name for h in hosts for name in _replica_names(h)}
    for host in hosts:
        mine = _replica_names(host)
        for member in members(host.profile):
            names = _member_names(member)
            if names & mine or _on_its_main_host(member):
                continue  # the main host lends its own devices too: inside the group
            where = (*member.field, "docker")
            replica = next((replicas[n] for n in sorted(names) if n in replicas), None)
            if replica is not None:
                found.append(
                    Conflict(
                        host.name,
                        where,
                        f"{member.kind} {member.name} runs on {worker_address(member)}, which is host {replica}, a "
                        "replica of this fleet: a host is a replica or one group's member, not both (their servers "
                        f"would share its devices, and the {member.kind}'s failure would take the replica down too); "
                        "a member's host stays in the inventory outside rollout.hosts' group (a group of the main "
                        "hosts, not all)",
                    )
                )
                continue
            taken = next((owner[n] for n in sorted(names) if n in owner and owner[n][0] != host.name), None)
            if taken is not None:
                found.append(
                    Conflict(
                        host.name,
                        where,
                        f"{member.kind} {member.name} runs on {worker_address(member)}, which is already host "
                        f"{taken[0]}'s {taken[1].kind} {taken[1].name}: a member's host serves one group "
                        f"({_ONE_CLIENT[member.kind]}); give each host its own in "
                        f"overrides.<host>.{'.'.join(map(str, member.field[:-1]))}",
                    )
                )
                continue
            for n in names:
                owner.setdefault(n, (host.name, member))
    return tuple(found)


@dataclass(frozen=True)
class MemberState:
    """One member of a group as its main host's kimik3 sees it: `state` up | dead | unknown, and why."""

    name: str
    endpoint: str  # a worker's bind:port (where the main server reaches its rpc-server), a node's bind
    state: str
    why: str = ""

    @property
    def dead(self) -> bool:
        return self.state == "dead"

    def text(self) -> str:
        return f"{self.name} {self.state}" + (f" ({self.why})" if self.why else "")


def worker_endpoint(member: RpcWorker | Member) -> str:
    """Where the main server reaches a worker (bind:port); a node's address (its engine's ports are its own)."""
    if member.port is None:
        return member.bind
    return f"[{member.bind}]:{member.port}" if ":" in member.bind else f"{member.bind}:{member.port}"


def member_states(host: FleetHost, status: Mapping[str, Any] | None) -> tuple[MemberState, ...]:
    """Each of `host`'s members from its `kimik3 status --json` document (None: the host did not answer): a worker
    from its `workers` facts, a node from its `members` facts and (vLLM) `ray_alive`, the addresses Ray's node table
    has a live raylet at (None: not read)."""
    doc = status or {}
    seen = {
        kind: {m.get("name"): m for m in doc.get(key) or () if isinstance(m, Mapping)}
        for kind, key in (("worker", "workers"), ("node", "members"))
    }
    alive = doc.get("ray_alive")
    main = (doc.get("container") or {}).get("started_at")
    return tuple(_state(m, seen[m.kind].get(m.name), main, status is not None, alive) for m in members(host.profile))


def _moment(stamp: object) -> datetime.datetime | None:
    """Docker's StartedAt (RFC 3339, UTC, a zero fraction dropped: compared as text '.5Z' sorts before 'Z'); None for
    Docker's zero time (never started) or what does not read as a time."""
    if not isinstance(stamp, str) or stamp.startswith("0001-"):
        return None
    try:
        return datetime.datetime.fromisoformat(stamp)
    except ValueError:
        return None


def _state(
    member: Member, fact: Mapping[str, Any] | None, main_started: str | None, answered: bool, alive: Any
) -> MemberState:
    where = worker_endpoint(member)
    what = "rpc-server" if member.kind == "worker" else "node"
    if fact is None:
        return MemberState(
            member.name,
            where,
            "unknown",
            "its main host did not answer" if not answered else "not in its main host's status",
        )
    if fact.get("error"):
        # Its Docker does not answer (the host down, ssh refused): the member may still serve; nothing is known.
        return MemberState(member.name, where, "unknown", f"its Docker does not answer: {fact['error']}")
    container = fact.get("container")
    if not container:
        return MemberState(member.name, where, "dead", f"no {what} container")
    if container.get("state") != "running":
        return MemberState(member.name, where, "dead", f"{what} container {container.get('state')}")
    if fact.get("port_open") is False:
        return MemberState(member.name, where, "dead", f"{where} does not accept connections")
    if member.kind == "node" and isinstance(alive, list) and member.bind not in alive:
        # Its container runs, but Ray's table has no live raylet there: the ranks the head placed on it are gone.
        return MemberState(member.name, where, "dead", f"no live Ray node at {member.bind}")
    started = _moment(container.get("started_at"))
    main = _moment(main_started)
    if member.kind == "worker" and main and started and started > main:
        # A new rpc-server holds none of the tensors the main server placed on the old. (A node starts after its
        # head's container by design: Ray's head runs there first.)
        return MemberState(member.name, where, "dead", "rpc-server restarted after the main server started")
    return MemberState(member.name, where, "up")
