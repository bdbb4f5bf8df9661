"""Rules about what the profile makes this host listen on and run: bind addresses, the exporter's and
proxy's ports, the systemd unit."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_rules.finding import FieldPath, Finding, error, warning


def _binds(p: Profile) -> Iterator[tuple[FieldPath, str]]:
    """Every address a listener of this host binds, where the profile says it (rpc workers bind on their hosts and
    have their own rule, rpc-bind-private)."""
    yield ("serve", "host"), p.serve.host
    if p.metrics is not None:
        yield ("metrics", "bind"), p.metrics.bind


def host(p: Profile) -> Iterator[Finding]:
    for where, host in _binds(p):
        if host not in ("loopback", "tailscale") and ipaddress.ip_address(host).is_unspecified:
            # rule: bind-all-interfaces
            # Seed 000: bind the tailnet address or loopback; never every interface unless written on purpose. The
            # exporter's port tells any network which quant, GPUs and load this host has.
            yield warning(where, f"{host} binds every interface of the host, not just loopback/the tailnet")


def systemd(p: Profile) -> Iterator[Finding]:
    if p.systemd is not None and p.unit_name in p.systemd.conflicts:
        # rule: unit-conflicts-self
        # Conflicts= with itself: starting the unit would stop it.
        yield error(("systemd", "conflicts"), f"lists the profile's own unit {p.unit_name!r}")


def metrics(p: Profile) -> Iterator[Finding]:
    metrics = p.metrics
    if metrics is None:
        return
    # rule: metrics-ports-distinct
    # One host port, one listener: the exporter, the proxy (serve.port) and llama-server behind it each need theirs.
    if metrics.port == p.serve.port:
        yield error(("metrics", "port"), f"is serve.port ({p.serve.port}): the exporter needs a port of its own")
    if metrics.server_port is not None and not metrics.proxy:
        # rule: metrics-ports-distinct
        # Without the proxy llama-server keeps serve.port: a server_port would be a port nothing binds.
        yield error(("metrics", "server_port"), "only with proxy: true (the server keeps serve.port otherwise)")
    elif metrics.server_port in (p.serve.port, metrics.port):
        # rule: metrics-ports-distinct
        # llama-server behind the proxy needs a port neither the proxy nor the exporter holds.
        yield error(("metrics", "server_port"), f"{metrics.server_port} is already serve.port or metrics.port")
    if metrics.handover is not None and not metrics.proxy:
        # rule: handover-needs-proxy
        # The front that holds requests is the proxy moved into a process of its own: without the proxy llama-server
        # holds serve.port itself and closes it at every replacement.
        yield error(
            ("metrics", "handover"),
            "only with proxy: true (the proxy is what holds requests while the server is replaced)",
        )
