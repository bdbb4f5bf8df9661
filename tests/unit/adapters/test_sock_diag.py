"""The listening sockets read through netlink sock_diag (adapters/sock_diag.py) are the ones /proc/net/tcp{,6}
lists, with the same addresses and inodes once parsed (observe/host.parse_tcp_listeners reads both)."""

from __future__ import annotations

import socket
from pathlib import Path

from kimik3_reconciler.adapters.host_linux import LinuxHost
from kimik3_reconciler.adapters.sock_diag import listening_tcp
from kimik3_reconciler.observe.host import parse_tcp_listeners


def test_netlink_finds_what_proc_lists_on_both_families() -> None:
    with socket.socket() as v4, socket.socket(socket.AF_INET6) as v6, socket.socket() as idle:
        v4.bind(("127.0.0.1", 0))
        v4.listen()
        port = v4.getsockname()[1]
        v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        v6.bind(("::1", port))
        v6.listen()
        idle.bind(("127.0.0.1", 0))  # bound, not listening: neither source lists it
        proc = Path("/proc/net/tcp").read_text() + Path("/proc/net/tcp6").read_text()
        found = parse_tcp_listeners(listening_tcp(), port)
        assert found == parse_tcp_listeners(proc, port)
        assert sorted(found.values()) == ["127.0.0.1", "::1"] and set(found) == {
            int(Path(f"/proc/self/fd/{s.fileno()}").readlink().name.strip("socket:[]")) for s in (v4, v6)
        }
        assert parse_tcp_listeners(listening_tcp(), idle.getsockname()[1]) == {}


def test_without_netlink_the_host_reads_proc(monkeypatch) -> None:  # noqa: ANN001
    from kimik3_reconciler.adapters import sock_diag

    def refused() -> str:
        raise OSError(93, "Protocol not supported")

    monkeypatch.setattr(sock_diag, "listening_tcp", refused)
    monkeypatch.setattr(LinuxHost, "tcp_tables", lambda self: "the /proc tables")
    assert LinuxHost().tcp_listening() == "the /proc tables"
