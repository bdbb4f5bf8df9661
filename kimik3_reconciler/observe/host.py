"""Host facts: physical cores (not hardware threads), CPU flags, Tailscale address. Pure parsers + collector."""

from __future__ import annotations

from kimik3_reconciler.model.facts import HostFacts
from kimik3_reconciler.ports import HostPort


def parse_lscpu_cores(parseable: str) -> int:
    """`lscpu -p=CORE,SOCKET` -> number of distinct (core, socket) pairs = physical cores."""
    pairs = {
        tuple(line.split(",")[:2])
        for line in parseable.splitlines()
        if line.strip() and not line.startswith("#")
    }
    return max(1, len(pairs))


def parse_cpu_flags(cpuinfo: str) -> tuple[str, ...]:
    """The `flags` line of /proc/cpuinfo (first CPU; they are uniform on servers)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return tuple(sorted(set(value.split())))
    return ()


def collect_host(host: HostPort) -> HostFacts:
    return HostFacts(
        physical_cores=parse_lscpu_cores(host.lscpu_parseable()),
        cpu_flags=parse_cpu_flags(host.cpuinfo()),
        tailscale_ipv4=host.tailscale_ipv4(),
    )
