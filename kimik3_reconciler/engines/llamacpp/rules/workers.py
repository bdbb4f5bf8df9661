"""Rules about RPC workers (issue 18): private IPv4 binds, distinct endpoints, a safe way to their Docker."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_rules.finding import Finding, error, warning

# tools/rpc/README.md of the pinned llama.cpp, quoted in every refusal of an RPC address.
RPC_WARNING = (
    'upstream: "the RPC backend is fragile and insecure. Never run the RPC server on an open network or '
    'in a sensitive environment!" (no authentication, no encryption)'
)
_CGNAT = ipaddress.ip_network("100.64.0.0/10")  # Tailscale's tailnet addresses: private to the tailnet


def _private(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Loopback, RFC 1918 / ULA / link-local, or a tailnet address: reachable only on a network the operator runs."""
    return (
        address.is_loopback or address.is_private or address in _CGNAT
        if address.version == 4
        else (address.is_loopback or address.is_private or address.is_link_local)
    )


def rpc_args(p: Profile) -> Iterator[Finding]:
    for i, arg in enumerate(p.serve.extra_args):
        if arg.split("=", 1)[0] == "--rpc":
            # rule: rpc-extra-args
            # An --rpc endpoint nobody checked or converged: kimik3 could not keep it off open networks.
            yield error(
                ("serve", "extra_args", i),
                f"--rpc is set by kimik3 from the rpc section, which checks "
                f"every worker's address and converges its rpc-server; {RPC_WARNING}",
            )


def worker_entries(p: Profile) -> Iterator[Finding]:
    seen: dict[tuple[str, int], str] = {}
    names: set[str] = set()
    for i, worker in enumerate(p.workers):
        where = ("rpc", "workers", i)
        address = ipaddress.ip_address(worker.bind)
        if address.is_unspecified:
            # rule: rpc-bind-private
            # Issue 18 / upstream tools/rpc: rpc-server has no authentication; every interface means every network.
            yield error(
                (*where, "bind"),
                f"{worker.bind} binds every interface of the worker: name one loopback or "
                f"private address; {RPC_WARNING}",
            )
        elif not _private(address):
            # rule: rpc-bind-private
            # A public address puts an unauthenticated tensor server on the internet.
            yield error(
                (*where, "bind"),
                f"{worker.bind} is a public address: bind a loopback or private one "
                f"(10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7); {RPC_WARNING}",
            )
        if address.version == 6:
            # rule: rpc-worker-shape
            # rpc-server (b11434 transport.cpp) opens an AF_INET socket and parses the host with inet_addr.
            yield error((*where, "bind"), f"{worker.bind}: rpc-server listens on IPv4 only: bind an IPv4 address")
        key = (worker.bind, worker.port)
        if key in seen:
            # rule: rpc-worker-shape
            # Two workers on one endpoint would be one rpc-server counted twice by --rpc and the gate.
            yield error((*where, "port"), f"{worker.bind}:{worker.port} is also the endpoint of worker {seen[key]}")
        seen[key] = worker.name
        if worker.name in names:
            # rule: rpc-worker-shape
            # The name is the worker's container name on its host and its key in plans.
            yield error((*where, "name"), f"worker {worker.name!r} is listed twice")
        names.add(worker.name)
        if worker.docker.startswith("tcp://") and worker.tls_dir is None:
            # rule: rpc-docker-tls
            # A plain tcp:// Docker socket is root on that host for anyone who can reach it.
            yield error(
                (*where, "tls_dir"),
                "a tcp:// Docker needs TLS: give tls_dir (ca.pem, cert.pem, key.pem), or use ssh://user@host",
            )
        if worker.tls_dir is not None and not worker.docker.startswith("tcp://"):
            # rule: rpc-docker-tls
            # ssh brings its own keys: a TLS folder there is a leftover, said so rather than ignored silently.
            yield warning((*where, "tls_dir"), "is only used with a tcp:// Docker URL")
        if worker.devices and worker.gpus == "none" and any(d.startswith("CUDA") for d in worker.devices):
            # rule: rpc-worker-shape
            # rpc-server would find no CUDA device in a container without GPUs and exit ("No devices found").
            yield error((*where, "devices"), "names a CUDA device but the worker's gpus is none")
