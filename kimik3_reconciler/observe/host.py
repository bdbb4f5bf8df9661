"""Host facts: CPU (physical cores, sockets, NUMA, flags), GPUs (NVML), RAM, numa_balancing, the NVIDIA kernel
module, Docker GPU plumbing, Tailscale, listeners on the profile's port, the mount a path lives on. Pure parsers (tested on
recorded outputs) + the collectors."""

from __future__ import annotations

import ipaddress
import os
import re
from typing import Any, Literal

from kimik3_reconciler.model.facts import FilesystemFact, GpuFact, GpuProcess, HostFacts, PortListener
from kimik3_reconciler.observe.docker_objects import docker_gives_gpus
from kimik3_reconciler.ports import DockerPort, HostPort


def parse_lscpu_cores(parseable: str) -> int:
    """`lscpu -p=CORE,SOCKET` -> number of distinct (core, socket) pairs = physical cores."""
    pairs = {tuple(line.split(",")[:2]) for line in parseable.splitlines() if line.strip() and not line.startswith("#")}
    return max(1, len(pairs))


def parse_lscpu_cpus(parseable: str) -> int | None:
    """`lscpu -p=CORE,SOCKET` -> its rows = logical CPUs (hardware threads), what `nproc` counts; None: no rows."""
    return sum(1 for line in parseable.splitlines() if line.strip() and not line.startswith("#")) or None


def parse_cpuinfo_cpus(cpuinfo: str) -> int | None:
    """/proc/cpuinfo -> its `processor` entries = logical CPUs; None when there are none."""
    return sum(1 for line in cpuinfo.splitlines() if line.partition(":")[0].strip() == "processor") or None


def parse_cpuinfo_cores(cpuinfo: str) -> int | None:
    """/proc/cpuinfo -> distinct (physical id, core id) pairs; None when the kernel does not say."""
    pairs, physical = set(), "0"
    for line in cpuinfo.splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "physical id":
            physical = value
        elif key == "core id":
            pairs.add((physical, value))
    return len(pairs) or None


def parse_cpu_flags(cpuinfo: str) -> tuple[str, ...]:
    """The `flags` line of /proc/cpuinfo (first CPU; they are uniform on servers)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return tuple(sorted(set(value.split())))
    return ()


def parse_lscpu_sockets(parseable: str) -> int:
    sockets = {
        line.split(",")[1]
        for line in parseable.splitlines()
        if line.strip() and not line.startswith("#") and line.count(",") >= 1
    }
    return max(1, len(sockets))


def parse_meminfo(text: str) -> tuple[int | None, int | None]:
    """/proc/meminfo -> (MemTotal, MemAvailable) in bytes."""
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return values.get("MemTotal"), values.get("MemAvailable")


def parse_numa_balancing(text: str | None) -> int | None:
    return int(text.strip()) if text and text.strip().lstrip("-").isdigit() else None


def parse_nvidia_module(version: str | None) -> Literal["open", "proprietary"] | None:
    """Which NVIDIA kernel module is loaded, from /proc/driver/nvidia/version's NVRM line: the open GPU kernel
    modules say "NVIDIA UNIX Open Kernel Module for x86_64  580.95.05 ...", the proprietary one "NVIDIA UNIX
    x86_64 Kernel Module  580.95.05 ..."."""
    line = next((line for line in (version or "").splitlines() if line.startswith("NVRM version:")), None)
    if line is None:
        return None  # no driver loaded (no file), or a format this kimik3 does not know: not judged
    return "open" if "Open Kernel Module" in line else "proprietary"


def parse_nvml(dump: dict[str, Any], our_pids: frozenset[int] = frozenset()) -> tuple[tuple[GpuFact, ...], str | None]:
    """The NVML dump (adapters/nvml.py, tests/fixtures/h200/nvml.json) -> GPU facts and the driver version."""
    gpus = tuple(
        GpuFact(
            index=g["index"],
            uuid=g["uuid"],
            name=g["name"],
            compute_capability=tuple(g["compute_capability"]),
            memory_total=g["memory_total"],
            memory_free=g["memory_free"],
            processes=tuple(
                GpuProcess(pid=p["pid"], used_bytes=p.get("used_memory") or 0, ours=p["pid"] in our_pids)
                for p in g.get("processes", ())
            ),
        )
        for g in dump.get("gpus", ())
    )
    return gpus, dump.get("driver")


def parse_driver_cuda(dump: dict[str, Any]) -> tuple[int, int] | None:
    """NVML's CUDA driver version (13000 = 13.0, 12080 = 12.8) -> (major, minor); None when not recorded."""
    value = dump.get("cuda_driver")
    return (value // 1000, value % 1000 // 10) if isinstance(value, int) and value > 0 else None


def _unescape_mount_field(field: str) -> str:
    """/proc/self/mounts writes space, tab, newline and backslash in paths as octal escapes (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def parse_mount_of(mounts: str, real_path: str) -> FilesystemFact | None:
    """/proc/self/mounts text -> the mount holding `real_path` (the longest mount point that contains it;
    the last one mounted there wins, as in the kernel's view)."""
    best: FilesystemFact | None = None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        source, mountpoint, fstype = (_unescape_mount_field(f) for f in fields[:3])
        inside = real_path == mountpoint or real_path.startswith(mountpoint.rstrip("/") + "/")
        if inside and (best is None or len(mountpoint) >= len(best.mountpoint)):
            best = FilesystemFact(path=real_path, mountpoint=mountpoint, fstype=fstype, source=source)
    return best


def collect_filesystem(host: HostPort, path: str) -> FilesystemFact | None:
    """The mount a (cache) directory lives on, after resolving symlinks: a link into an NFS mount counts."""
    return parse_mount_of(host.mounts(), host.real_path(path))


_TCP_ESTABLISHED = "01"
_TCP_LISTEN = "0A"  # include/net/tcp_states.h: TCP_LISTEN = 10


def _proc_net_address(hex_address: str) -> str:
    """/proc/net/tcp prints addresses as host-order 32-bit words in hex: 0100007F is 127.0.0.1."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))


def parse_tcp_listeners(tables: str, port: int) -> dict[int, str]:
    """/proc/net/tcp{,6} text -> {socket inode: local address} of the sockets listening on `port`."""
    found = {}
    for line in tables.splitlines():
        fields = line.split()
        if len(fields) < 10 or ":" not in fields[1] or fields[3] != _TCP_LISTEN:
            continue  # the header line, or a socket that is not listening
        address, _, hex_port = fields[1].partition(":")
        if int(hex_port, 16) == port and fields[9].isdigit() and fields[9] != "0":
            found[int(fields[9])] = _proc_net_address(address)
    return found


_CONTAINER_ID = re.compile(r"(?:^|[/-])([0-9a-f]{64})(?:\.scope)?$")


def parse_cgroup_container(cgroup: str) -> str | None:
    """/proc/<pid>/cgroup text -> the Docker container id the process runs in (None: not in a container).
    Docker names the cgroup after the full id: `/docker/<id>` (cgroupfs driver), `/system.slice/docker-<id>.scope`
    (systemd driver); cgroup v1 repeats it per controller, v2 has one `0::` line."""
    for line in cgroup.splitlines():
        path = line.split(":", 2)[-1].strip()
        found = _CONTAINER_ID.search(path)
        if found:
            return found.group(1)
    return None


def parse_tcp_clients(tables: str, port: int) -> tuple[str, ...]:
    """/proc/net/tcp{,6} text -> the remote addresses of the connections established to local `port`."""
    found = []
    for line in tables.splitlines():
        fields = line.split()
        if len(fields) < 4 or ":" not in fields[1] or fields[3] != _TCP_ESTABLISHED:
            continue
        _, _, hex_port = fields[1].partition(":")
        if int(hex_port, 16) == port:
            found.append(_proc_net_address(fields[2].partition(":")[0]))
    return tuple(sorted(found))


def collect_listeners(host: HostPort, port: int, our_pids: frozenset[int] = frozenset()) -> tuple[PortListener, ...]:
    """Who listens on the profile's port: a foreign one makes llama-server exit with "couldn't bind". Each owner's
    container comes from its cgroup, so any process inside a container (a child, a wrapper) is matched to it."""
    sockets = parse_tcp_listeners(host.tcp_listening(), port)
    owners = host.socket_owners(set(sockets), our_pids) if sockets else {}
    listeners = []
    for inode, address in sorted(sockets.items()):
        pid, program = owners.get(inode, (None, None))
        container_id = parse_cgroup_container(host.process_cgroup(pid)) if pid else None
        listeners.append(PortListener(address=address, port=port, pid=pid, program=program, container_id=container_id))
    return tuple(listeners)


def collect_host(
    host: HostPort,
    docker: DockerPort | None = None,
    our_pids: frozenset[int] = frozenset(),
    ports: tuple[int, ...] = (),
    lscpu: str | None = None,
    nvml: dict | None = None,
    binds: tuple[str, ...] = (),
) -> HostFacts:
    """`ports`: the TCP ports the profile binds (their listeners are read); `binds`: the IP literals it binds on
    (each asked whether this host has it). `lscpu`, `nvml`: the port's answers when the caller asked for them
    already (observe/__init__.py asks ahead, while dockerd answers); else asked here."""
    lscpu = host.lscpu_parseable() if lscpu is None else lscpu
    cpuinfo = host.cpuinfo()
    has_rows = any(line.strip() and not line.startswith("#") for line in lscpu.splitlines())
    # Without lscpu, /proc/cpuinfo still knows the cores: a missing tool must not turn into
    # `--threads 1` and a relaunch of a healthy server.
    cores = parse_lscpu_cores(lscpu) if has_rows else (parse_cpuinfo_cores(cpuinfo) or os.cpu_count() or 1)
    # The texts read for the cores already list each logical CPU: what the image's `-j$(nproc)` compile runs on.
    cpus = parse_lscpu_cpus(lscpu) or parse_cpuinfo_cpus(cpuinfo) or os.cpu_count()
    dump = host.nvml() if nvml is None else nvml
    gpus, driver = parse_nvml(dump, our_pids)
    ram_total, ram_available = parse_meminfo(host.meminfo())
    return HostFacts(
        physical_cores=cores,
        logical_cpus=max(cpus, cores) if cpus else None,
        sockets=parse_lscpu_sockets(lscpu),
        numa_nodes=host.numa_nodes(),
        cpu_flags=parse_cpu_flags(cpuinfo),
        tailscale_ipv4=host.tailscale_ipv4(),
        absent_addresses=tuple(address for address in binds if not host.has_address(address)),
        gpu_probe="no-driver" if "error" in dump else "ok",
        gpu_probe_detail=dump.get("error"),
        driver_version=driver,
        driver_cuda=parse_driver_cuda(dump),
        gpus=gpus,
        ram_total=ram_total,
        ram_available=ram_available,
        numa_balancing=parse_numa_balancing(host.numa_balancing()),
        nvidia_module=parse_nvidia_module(host.nvidia_version()),
        docker_gpus=docker_gives_gpus(docker, host) if docker is not None else None,
        listeners=tuple(listener for port in ports for listener in collect_listeners(host, port, our_pids)),
    )
