"""FakeHost: raw host facts (lscpu, NVML, mounts, CDI, /proc/net/tcp, cgroups) as a plain 8-core host gives them."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any


class FakeHost:
    def __init__(self, cores: int = 8, flags: str = "avx2 avx512f"):
        self.cores, self.flags = cores, flags
        self.free_bytes = 1 << 40
        self.nvml_dump: dict[str, Any] = {"error": "NVMLError_LibraryNotFound: NVML Shared Library Not Found"}
        self.numa: str | None = "0\n"
        self.nvidia_version_text: str | None = None  # /proc/driver/nvidia/version; None: no module loaded
        self.tcp_text, self.owners = "", {}  # /proc/net/tcp{,6} and inode -> (pid, program): nothing listens
        self.cgroups: dict[int, str] = {}  # pid -> /proc/<pid>/cgroup text; default: not in a container
        self.mount_text = "/dev/nvme0n1p2 / ext4 rw,relatime 0 0\n"  # /proc/self/mounts: one local root
        self.cdi: dict[str, str] = {}  # CDI spec path -> text
        self.toolkit = ""  # `nvidia-ctk --version` output
        self.hook = False  # the toolkit's nvidia-container-runtime-hook on dockerd's PATH
        self.proc: dict[tuple[int, str], str] = {}  # (pid, "io" | "status") -> the /proc file's text
        self.cached: set[str] = set()  # paths the fake page cache holds (pre-read)
        self.preread_calls: list[tuple[list[str], int]] = []
        self.preread_limits: list[int | None] = []  # each call's limit_bytes (None: every byte)
        self.rss: dict[int, int] = {}  # pid -> VmRSS bytes
        self.page_cache: dict[str, tuple[int, int]] = {}  # path -> (cached bytes, size)
        self.foreign_addresses: set[str] = set()  # IP literals this fake host cannot bind (not its own)
        self.hashed: dict[str, int] = {}  # path -> bytes file_digest read (model files re-hashed by a plan)

    def lscpu_parseable(self) -> str:
        return "\n".join(f"{c},0" for c in range(self.cores))

    def cpuinfo(self) -> str:
        return f"flags\t\t: {self.flags}\n"

    def tailscale_ipv4(self) -> str | None:
        return None

    def has_address(self, address: str) -> bool:
        return address not in self.foreign_addresses

    def disk_free(self, path: str) -> int:
        return self.free_bytes

    def mounts(self) -> str:
        return self.mount_text

    def real_path(self, path: str) -> str:
        return path

    def nvml(self) -> dict[str, Any]:
        return self.nvml_dump

    def meminfo(self) -> str:
        return "MemTotal:       24683584 kB\nMemAvailable:   23311316 kB\n"

    def numa_balancing(self) -> str | None:
        return self.numa

    def nvidia_version(self) -> str | None:
        return self.nvidia_version_text

    def numa_nodes(self) -> int:
        return 1

    def cdi_specs(self) -> list[str]:
        return list(self.cdi)

    def cdi_spec_text(self, path: str) -> str:
        return self.cdi.get(path, "")

    def runtime_hook(self) -> bool:
        return self.hook

    def container_toolkit_version(self) -> str:
        return self.toolkit

    def tcp_tables(self) -> str:
        return self.tcp_text

    def tcp_listening(self) -> str:  # the same lines: the parser keeps the LISTEN ones
        return self.tcp_text

    def socket_owners(self, inodes: set[int], likely: frozenset[int] = frozenset()) -> dict[int, tuple[int, str]]:
        return {inode: owner for inode, owner in self.owners.items() if inode in inodes}

    def process_cgroup(self, pid: int) -> str:
        return self.cgroups.get(pid, "0::/")

    def process_file(self, pid: int, name: str) -> str:
        return self.proc.get((pid, name), "")

    def preread(
        self, paths: list[str], workers: int, on_bytes: Callable[[int], None], stop=None, limit_bytes: int | None = None
    ) -> None:
        """Every file cached whole; with `limit_bytes`, the files in order up to the limit (the last one in part,
        as `page_cache` then says)."""
        self.preread_calls.append((list(paths), workers))
        self.preread_limits.append(limit_bytes)
        left = limit_bytes
        for path in paths:
            size = Path(path).stat().st_size if Path(path).exists() else 0
            if left is not None:
                if left <= 0:
                    break
                if size > left:
                    self.page_cache[path] = (left, size)
                    on_bytes(left)
                    break
                left -= size
            self.cached.add(path)
            on_bytes(size)

    def resident_bytes(self, paths: list[str]) -> int:
        return sum(
            self.page_cache[p][0] if p in self.page_cache else Path(p).stat().st_size
            for p in paths
            if (p in self.cached or p in self.page_cache) and Path(p).exists()
        )

    def file_digest(self, path: str, algorithm: str, prefix: bytes = b"") -> str:
        """The real digest of the real file (the fakes' caches are real folders), its bytes counted in `hashed`."""
        data = Path(path).read_bytes()
        self.hashed[path] = self.hashed.get(path, 0) + len(data)
        return hashlib.new(algorithm, prefix + data).hexdigest()

    def process_rss(self, pid: int) -> int | None:
        return self.rss.get(pid)

    def page_cache_bytes(self, path: str) -> tuple[int, int] | None:
        """`page_cache` as set, else a file is cached whole once pre-read (`cached`), not at all before (a path
        the fakes never wrote, e.g. the fake hub's snapshot links, reads as an empty file once pre-read)."""
        if path in self.page_cache:
            return self.page_cache[path]
        if not Path(path).exists():
            return (0, 0) if path in self.cached else None
        size = Path(path).stat().st_size
        return (size if path in self.cached else 0, size)
