"""The host's listening TCP sockets through netlink sock_diag (what `ss -lt` asks), in /proc/net/tcp's line format.

Reading /proc/net/tcp{,6} makes the kernel walk every bucket of its established-connection hash table (262,144
on a 64 GiB host: ~3.5 ms each at best, tens of ms on a busy 2-core machine), on every plan, to find the one
or two listening sockets on the profile's ports. sock_diag with a LISTEN-only state filter answers from the
listening hash alone (~0.1 ms). The lines carry what observe/host.py's parser reads from /proc (local
address and port as /proc prints them, state, inode), so one parser serves both; where netlink is refused
(no NETLINK_SOCK_DIAG: an old kernel, a seccomp profile) the caller reads /proc instead.
"""

from __future__ import annotations

import os
import socket
import struct
import sys

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
TCP_LISTEN = 10
_HEADER = struct.Struct("=IHHII")  # struct nlmsghdr: len, type, flags, seq, pid
_REQUEST = struct.Struct("=BBBBI48x")  # struct inet_diag_req_v2: family, protocol, ext, pad, states, (sockid: any)
_MESSAGE = struct.Struct("=BBBB2s2s16s16sI8sIIIII")  # struct inet_diag_msg (72 bytes)


def _proc_hex(address: bytes) -> str:
    """An address as /proc/net/tcp prints it: each 32-bit word in host byte order, in hex."""
    words = (address[i : i + 4] for i in range(0, len(address), 4))
    return "".join(f"{struct.unpack('=I', word)[0]:08X}" for word in words)


def _dump(sock: socket.socket, family: int, seq: int) -> list[str]:
    request = _REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, 1 << TCP_LISTEN)
    sock.send(
        _HEADER.pack(_HEADER.size + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + request
    )
    width = 4 if family == socket.AF_INET else 16
    lines = []
    while True:
        data = sock.recv(65536)
        offset = 0
        while offset + _HEADER.size <= len(data):
            length, kind, _, _, _ = _HEADER.unpack_from(data, offset)
            if kind == NLMSG_DONE:
                return lines
            if kind == NLMSG_ERROR:
                errno = -struct.unpack_from("=i", data, offset + _HEADER.size)[0]
                raise OSError(errno, os.strerror(errno))
            if length < _HEADER.size + _MESSAGE.size:
                raise OSError(f"sock_diag: a {length}-byte message")
            (_, state, _, _, sport, _, src, _, _, _, _, _, _, uid, inode) = _MESSAGE.unpack_from(
                data, offset + _HEADER.size
            )
            port = struct.unpack("!H", sport)[0]
            # sl local rem st tx:rx tr:when retrnsmt uid timeout inode: the columns /proc/net/tcp has
            lines.append(
                f"{len(lines)}: {_proc_hex(src[:width])}:{port:04X} {'0' * (2 * width)}:0000 {state:02X} "
                f"00000000:00000000 00:00000000 00000000 {uid} 0 {inode}"
            )
            offset += (length + 3) & ~3
        if not data:
            raise OSError("sock_diag: the dump ended without NLMSG_DONE")


def listening_tcp() -> str:
    """The LISTEN sockets of both families, as /proc/net/tcp then /proc/net/tcp6 lines (no header);
    OSError where netlink sock_diag is not available."""
    if not sys.platform.startswith("linux"):
        raise OSError("netlink sock_diag is Linux only")
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as sock:
        sock.settimeout(2.0)
        lines = _dump(sock, socket.AF_INET, 1) + _dump(sock, socket.AF_INET6, 2)
    return "\n".join(lines) + "\n"
