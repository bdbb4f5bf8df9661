"""Raw host facts from Linux: lscpu, /proc/cpuinfo, /proc/net/tcp and socket owners, /proc/self/mounts, tailscale
(argv lists, never a shell)."""

from __future__ import annotations

import errno
import itertools
import os
import shutil
import socket
import subprocess
from pathlib import Path
from threading import Event

from kimik3_reconciler.ports import Tally

# systemd's default PATH, dockerd's under docker.service: assumed where the running dockerd's own cannot be read.
_DOCKERD_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
_HOOK = "nvidia-container-runtime-hook"


def _run(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _dockerd_path(docker_host: str | None) -> tuple[str, ...]:
    """The PATH of the dockerd at `docker_host` (default: DOCKER_HOST, else /var/run/docker.sock), from its
    /proc/<pid>/environ, its pid from the pid file dockerd writes beside its socket (/var/run/docker.pid;
    $XDG_RUNTIME_DIR/docker.pid when rootless); systemd's default PATH where that cannot be read; none for a daemon
    reached over tcp:// or ssh:// (its host's files are out of reach, as a cluster node's)."""
    url = docker_host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if not url.startswith("unix://"):  # a daemon behind tcp:// or ssh://: this host's disk says nothing of its hook
        return ()
    pid = _read(str(Path(url.removeprefix("unix://")).with_name("docker.pid"))).strip()
    # The pid file outlives a dockerd that died, and its pid may be another process's by now.
    if not pid.isdigit() or _read(f"/proc/{pid}/comm").strip() != "dockerd":
        return _DOCKERD_PATH
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # a root dockerd's environment is root's to read: kimik3 in the docker group assumes systemd's
        return _DOCKERD_PATH
    for entry in environ.split(b"\0"):
        if entry.startswith(b"PATH="):
            return tuple(d for d in entry[5:].decode(errors="replace").split(":") if d)
    return ()  # no PATH at all: Go's exec.LookPath then finds nothing


class LinuxHost:
    def __init__(self, docker_host: str | None = None) -> None:
        self.docker_host = docker_host  # the daemon `runtime_hook` reads the PATH of (--docker-host)

    def process_file(self, pid: int, name: str) -> str:
        return _read(f"/proc/{int(pid)}/{name}")

    def preread(
        self, paths: list[str], workers: int, on_bytes: Tally, stop: Event | None = None, limit_bytes: int | None = None
    ) -> None:
        from kimik3_reconciler.adapters import page_cache  # its thread pool: not loaded by a plan that reads none

        page_cache.preread(paths, workers, on_bytes, stop=stop, limit=limit_bytes)

    def resident_bytes(self, paths: list[str]) -> int:
        return sum((self.page_cache_bytes(p) or (0, 0))[0] for p in paths)

    def lscpu_parseable(self) -> str:
        return _run(["lscpu", "-p=CORE,SOCKET"]) if shutil.which("lscpu") else ""

    def cpuinfo(self) -> str:
        try:
            return Path("/proc/cpuinfo").read_text()
        except OSError:
            return ""

    def nvml(self) -> dict:
        from kimik3_reconciler.adapters.nvml import nvml_dump

        return nvml_dump()

    def meminfo(self) -> str:
        return _read("/proc/meminfo")

    def numa_balancing(self) -> str | None:
        return _read("/proc/sys/kernel/numa_balancing") or None

    def nvidia_version(self) -> str | None:
        return _read("/proc/driver/nvidia/version") or None

    def numa_nodes(self) -> int:
        return max(1, len(list(Path("/sys/devices/system/node").glob("node[0-9]*"))))

    def cdi_specs(self) -> list[str]:
        return [str(p) for d in ("/etc/cdi", "/var/run/cdi") for p in Path(d).glob("*") if p.is_file()]

    def cdi_spec_text(self, path: str) -> str:
        return _read(path)

    def runtime_hook(self) -> bool:
        # dockerd looks the hook up on its own PATH when it starts (moby's nvidia device driver, registered then):
        # the running dockerd's PATH where readable (root, or a rootless dockerd's own user), else systemd's.
        return any(os.access(Path(d) / _HOOK, os.X_OK) for d in _dockerd_path(self.docker_host))

    def container_toolkit_version(self) -> str:
        for tool in ("nvidia-ctk", "nvidia-container-cli"):
            if shutil.which(tool):
                return _run([tool, "--version"])
        return ""

    def disk_free(self, path: str) -> int:
        return shutil.disk_usage(_existing(Path(path))).free

    def mounts(self) -> str:
        return _read("/proc/self/mounts")

    def real_path(self, path: str) -> str:
        """The path with symlinks resolved; a part that does not exist yet keeps its name."""
        return os.path.realpath(path)

    def tailscale_ipv4(self) -> str | None:
        if not shutil.which("tailscale"):
            return None
        lines = _run(["tailscale", "ip", "-4"]).split()
        return lines[0] if lines else None

    def has_address(self, address: str) -> bool:
        """Whether a socket can bind `address` (port 0: any free one, closed at once). EADDRNOTAVAIL is the kernel's
        "not an address of this host"; another error (a firewall, permissions) is not that, so counts as present."""
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind((address, 0))
        except OSError as exc:
            return exc.errno != errno.EADDRNOTAVAIL
        return True

    def tcp_tables(self) -> str:
        return _read("/proc/net/tcp") + _read("/proc/net/tcp6")

    def tcp_listening(self) -> str:
        from kimik3_reconciler.adapters.sock_diag import listening_tcp

        try:
            return listening_tcp()  # netlink: the listening sockets alone, not the kernel's whole table
        except OSError:
            return self.tcp_tables()

    def process_rss(self, pid: int) -> int | None:
        """Resident bytes of a process (VmRSS in /proc/<pid>/status); None when it is gone or unreadable."""
        for line in _read(f"/proc/{pid}/status").splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return None

    def file_digest(self, path: str, algorithm: str, prefix: bytes = b"") -> str:
        import hashlib

        digest = hashlib.new(algorithm, prefix, usedforsecurity=False)  # a content id (the git blob sha1 too)
        with open(path, "rb") as data:
            # hashlib.file_digest: the file read into one reused buffer, the GIL released while hashing.
            return hashlib.file_digest(data, lambda: digest).hexdigest()

    def page_cache_bytes(self, path: str) -> tuple[int, int] | None:
        """(bytes of `path` in the page cache, its size), by mincore(2) over 1 GiB windows of a read-only
        mapping (what fincore does; nothing is read or faulted in). None: unreadable."""
        from kimik3_reconciler.adapters import page_cache

        return page_cache.resident(path)

    def socket_owners(self, inodes: set[int], likely: frozenset[int] = frozenset()) -> dict[int, tuple[int, str]]:
        """Which process holds each socket inode: /proc/<pid>/fd/* links read `socket:[inode]` (what ss -p does).

        `likely` pids are read first (our container's server): on a converged host the scan stops there."""
        wanted = {f"socket:[{inode}]": inode for inode in inodes}
        owners: dict[int, tuple[int, str]] = {}
        others = (p for p in Path("/proc").iterdir() if p.name.isdigit() and int(p.name) not in likely)
        for proc in itertools.chain((Path(f"/proc/{pid}") for pid in sorted(likely)), others):
            if len(owners) == len(wanted):
                break
            for link in _fd_links(proc):
                if link in wanted:
                    owners[wanted[link]] = (int(proc.name), _read(str(proc / "comm")).strip())
        return owners

    def tcp_connect(self, address: str, port: int, timeout_s: float = 2.0) -> bool:
        """Does a TCP connect to address:port succeed from this host (an RPC worker's rpc-server)?"""
        try:
            with socket.create_connection((address, port), timeout=timeout_s):
                return True
        except OSError:
            return False

    def process_cgroup(self, pid: int) -> str:
        return _read(f"/proc/{pid}/cgroup")


def _existing(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists (the cache dir may not exist yet)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _fd_links(proc: Path) -> list[str]:
    try:
        fds = list((proc / "fd").iterdir())
    except OSError:
        return []  # gone, or another user's process (not root): its sockets stay unattributed
    links = []
    for fd in fds:
        try:
            links.append(os.readlink(fd))
        except OSError:
            continue  # closed since the listing
    return links
