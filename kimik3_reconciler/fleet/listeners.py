"""What listens where in a fleet, checked before anything runs, PURE: each host's server and model mirror, and the
router's ports on its machine. Two listeners on one address and port: the second never starts, and `fleet apply`
would find out halfway through a rollout (the router, or a host's mirror, refused to bind)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kimik3_reconciler.fleet.host_vars import mirror_port, written_at
from kimik3_reconciler.fleet.router_layout import METRICS_OFFSET, SMG_OFFSET
from kimik3_reconciler.fleet.values import FleetHost
from kimik3_reconciler.model.profile_rules import FieldPath

LOOPBACK = re.compile(r"localhost|127(\.\d{1,3}){3}|::1")
WILDCARD = ("0.0.0.0", "::")  # every address of the machine (profile_schema refuses ::ffff:0.0.0.0)


@dataclass(frozen=True)
class Clash:
    """A problem at `path` (or, where that is not written, at `near`)."""

    path: FieldPath
    message: str
    near: FieldPath = ()


def bind_address(host: FleetHost) -> str:
    """The address the host's server (and its mirror) binds, as the fleet names it: the host's own for loopback and
    for a wildcard (0.0.0.0 and :: are every address of that host's machine, not one address all hosts share)."""
    bind = host.profile.serve.host
    return host.address if bind == "loopback" or bind in WILDCARD else bind


def binds_loopback(host: FleetHost) -> bool:
    """The host's server answers on its own machine only: `loopback`, or a loopback address written as such."""
    return host.profile.serve.host == "loopback" or LOOPBACK.fullmatch(host.profile.serve.host) is not None


def on_router_machine(host: FleetHost, router_host: str) -> bool:
    """The host is the controller, where the router runs (cli/fleet_router.py): reached at the controller's loopback
    (its ansible_host, whatever address its server binds), or at the address router.host names."""
    return LOOPBACK.fullmatch(host.address) is not None or router_host == host.address


def router_ports(port: int, policy: str) -> dict[int, str]:
    """The ports the router takes on its machine (fleet/router_layout.py): port -> what listens there."""
    if policy == "slots":
        return {port: "kimik3's router", port + METRICS_OFFSET: "smg's metrics", port + SMG_OFFSET: "smg"}
    return {port: "smg", port + METRICS_OFFSET: "smg's metrics"}


def shares_router_bind(host: FleetHost, router_host: str) -> bool:
    """The host's listeners (its server, its mirror: both bind serve.host) may hold the router's address and ports.
    The router binds router.host on the controller (fleet/router_layout.py): 127.0.0.1 for localhost, or the address
    written (0.0.0.0 and :: every address). A host on the controller shares it where one of the two binds every
    address or both bind the same one; a specific other address of the controller is another socket."""
    if not on_router_machine(host, router_host):
        return False
    bind = host.profile.serve.host
    mine = "127.0.0.1" if bind == "loopback" else bind
    router_bind = "127.0.0.1" if router_host == "localhost" else router_host
    return mine in WILDCARD or router_bind in WILDCARD or mine == router_bind


def clashes(
    hosts: tuple[FleetHost, ...],
    router_host: str,
    port: int,
    policy: str,
    entries: Mapping[str, FieldPath],
    tree: Mapping[str, Any],
) -> Iterator[Clash]:
    """Each listener that cannot start: a router port past 65535, a mirror port that is no port, a mirror on a port
    another listener of its address holds, a server or mirror on a port of the router's (on the router's machine)."""
    # No address here (tailscale), or one the router cannot reach (loopback elsewhere): `unreachable` says so.
    hosts = tuple(
        h
        for h in hosts
        if h.profile.serve.host != "tailscale" and not (binds_loopback(h) and not on_router_machine(h, router_host))
    )
    ports = router_ports(port, policy)
    if max(ports) > 65535:
        top = max(ports)
        yield Clash(
            ("router", "port"),
            f"{port}: the router also takes port {top} ({ports[top]}), past 65535: at most {port - (top - 65535)}",
        )
    taken: dict[tuple[str, int], tuple[str, FleetHost]] = {
        (bind_address(h), h.profile.serve.port): (f"host {h.name}'s server", h) for h in hosts
    }
    mirrors: list[tuple[str, int, FleetHost]] = []
    refused: set[FieldPath] = set()
    for host in hosts:
        # Named where it is written: a group's var is refused at the group's line, not at a host that never wrote it.
        written = written_at(tree, host.name, host.groups, "kimik3_mirror_port", host.vars.get("kimik3_mirror_port"))
        where, var = bind_address(host), written or (*entries[host.name], "kimik3_mirror_port")
        mirror = mirror_port(host.vars)
        if mirror is None:
            if var not in refused:  # a group's var: said once, at its line, not once per host of the group
                message = "must be a TCP port (1-65535): the port each host serves its model files on during a rollout"
                yield Clash(var, message, near=entries[host.name])
            refused.add(var)
            continue
        if (where, mirror) in taken:
            yield Clash(
                var,
                f"{where}:{mirror} is {taken[(where, mirror)][0]}: host {host.name}'s model mirror needs a port of "
                "its own (kimik3_mirror_port, default 8089)",
                near=entries[host.name],
            )
        # Not compared with each other: hosts on one address (several "hosts" of one machine, how plan and status
        # are tested) share more than the mirror's port in a `fleet apply` (the container's name): a known gap.
        mirrors.append((where, mirror, host))
    listening = [(where, held, holder, host) for (where, held), (holder, host) in taken.items()]
    listening += [(where, held, f"host {host.name}'s model mirror", host) for where, held, host in mirrors]
    for where, held, holder, host in listening:
        if shares_router_bind(host, router_host) and held in ports:
            yield Clash(
                ("router", "port"),
                f"{port}: the router puts {ports[held]} on port {held}, which {holder} holds on the same machine "
                f"({where}): the router takes {len(ports)} ports in a row from router.port, none of them a host's",
            )


def unreachable(hosts: tuple[FleetHost, ...], router_host: str, entries: Mapping[str, FieldPath]) -> Iterator[Clash]:
    """Each server the router could not reach, or that another server's address and port already hold."""
    seen: dict[tuple[str, int], str] = {}
    for host in hosts:
        serve = host.profile.serve
        if serve.host == "tailscale":
            # Resolved by the host's own launch (its tailnet address, else loopback): the router and the other hosts'
            # mirrors need the address here, before any host is asked.
            yield Clash(
                ("overrides", host.name, "serve", "host"),
                f"host {host.name}'s server binds serve.host: tailscale, an address only that host knows: set "
                f"overrides.{host.name}.serve.host to its tailnet address, which the router reaches",
                near=entries[host.name],
            )
            continue
        if binds_loopback(host) and not on_router_machine(host, router_host):
            # A loopback bind answers only on that host: the router elsewhere would see it down forever.
            written = "" if serve.host == "loopback" else f" ({serve.host})"
            yield Clash(
                ("overrides", host.name, "serve", "host"),
                f"host {host.name}'s server binds loopback{written}, which the router on {router_host} cannot "
                f"reach: set overrides.{host.name}.serve.host to an address of {host.address}",
                near=entries[host.name],
            )
            continue
        where = bind_address(host)
        if (where, serve.port) in seen:
            yield Clash(
                ("overrides", host.name),
                f"host {host.name} serves on {where}:{serve.port} as host "
                f"{seen[(where, serve.port)]} does: give one of them another serve.port",
                near=entries[host.name],
            )
        seen[(where, serve.port)] = host.name
