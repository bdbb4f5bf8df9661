"""Hand a helper's listening sockets to its replacement (issue 38 item 2): the public port never closes.

A helper that owns a port clients use (the exporter's proxy on serve.port, the front) offers its listening sockets
on an abstract unix socket named after its state dir, its kind and its profile. The replacement, started while the
old one still serves, takes them at its start (SCM_RIGHTS: the same kernel sockets, their accept queue included),
serves on them, and says so; the old one then stops accepting, finishes the requests it holds and exits. At every
moment one process or both accept on the port: no client is refused. A socket the old one offers that the new one
does not serve (its port changed) is closed by both; one the new one serves that was not offered is bound as usual.

Only a process of the same user (root's only to root) in this host's mount namespace may take them (not root in an
engine's container, which shares the host's network and so its abstract names), and a helper takes sockets only
from one (SO_PEERCRED both ways: the sockets are the public port), each checked to listen where the offer says.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

MAX_SOCKETS = 8
TAKEN = b"taken"
# The new process connects, receives and answers within these: a stuck peer is given up, and both go on alone.
TAKE_TIMEOUT_S = 5.0
ACK_TIMEOUT_S = 30.0

Address = tuple[str, int]


def handover_name(state_dir: Path | str, what: str, profile: str) -> str:
    """The abstract unix socket name both the old and the new helper of `what` for `profile` derive alike."""
    key = f"{Path(state_dir).resolve()}\0{what}\0{profile}".encode()
    return "\0kimik3-handover-" + hashlib.sha256(key).hexdigest()[:32]


@dataclass
class Taken:
    """Listening sockets received from the helper being replaced, by the address it served them on."""

    sockets: dict[Address, socket.socket] = field(default_factory=dict)
    _channel: socket.socket | None = None

    def pop(self, address: Address) -> socket.socket | None:
        return self.sockets.pop(address, None)

    def keep(self) -> None:
        """This start failed: close the copies received, and leave the old helper serving (no `taken`)."""
        for received in self.sockets.values():
            received.close()
        self.sockets.clear()
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def done(self) -> None:
        """Say the sockets are served here now (the old helper then stops accepting), and close those not used."""
        for unused in self.sockets.values():
            unused.close()
        self.sockets.clear()
        if self._channel is not None:
            try:
                self._channel.sendall(TAKEN)
            except OSError:
                pass  # the old helper is gone: nothing else accepts on these sockets anyway
            self._channel.close()
            self._channel = None


def take(name: str) -> Taken:
    """The sockets the running helper offers under `name`; none (an empty Taken) when no helper offers them."""
    channel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    channel.settimeout(TAKE_TIMEOUT_S)
    try:
        channel.connect(name)
        # Only from a helper of this user (or root) on this host: anyone may bind an abstract name first, and a
        # socket taken from them could listen on another address, or be accepted on by them too.
        if not _trusted(channel):
            raise ValueError("offered by another user or from a container")
        message, fds, _, _ = socket.recv_fds(channel, 1 << 16, MAX_SOCKETS)
    except (OSError, ValueError):
        channel.close()
        return Taken()
    for fd in fds:
        # Close-on-exec, as every descriptor Python opens (SCM_RIGHTS gives inheritable ones, and Python 3.11's
        # recv_fds drops its flags argument): a program this helper runs must not hold the public port.
        os.set_inheritable(fd, False)
    try:
        addresses = [(str(host), int(port)) for host, port in json.loads(message.decode())]
        if len(addresses) != len(fds):
            raise ValueError("torn message")
    except (ValueError, TypeError):  # a torn or malformed message: use none of them, bind as usual
        for fd in fds:
            os.close(fd)
        channel.close()
        return Taken()
    channel.settimeout(None)
    sockets = {}
    for address, fd in zip(addresses, fds):
        try:
            sock = socket.socket(fileno=fd)
        except OSError:  # not a socket at all: closed, the address bound as usual
            os.close(fd)
            continue
        if _listens_on(sock, *address):
            sockets[address] = sock
        else:  # not what it claims to be: bound as usual instead
            sock.close()
    return Taken(sockets, channel)


def _listens_on(sock: socket.socket, host: str, port: int) -> bool:
    """The received socket is a listening TCP socket bound to (host, port), as the offer says."""
    try:
        bound = sock.getsockname()
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
        return (
            listening
            and sock.type == socket.SOCK_STREAM
            and bound[1] == port
            and ipaddress.ip_address(bound[0]) == ipaddress.ip_address(host)
        )
    except (OSError, ValueError, IndexError, TypeError):
        return False


class Offer:
    """The running helper's side: a thread answers one replacement with its listening sockets, then calls
    `handed_over` (the helper stops accepting and exits once its requests are done)."""

    def __init__(self, name: str, listeners: dict[Address, socket.socket], handed_over: Callable[[], None]):
        self.name, self.listeners, self.handed_over = name, listeners, handed_over
        self._server: socket.socket | None = None

    def start(self, bind_timeout_s: float = ACK_TIMEOUT_S) -> None:
        """Listen under the name (the helper this one replaced frees it once it got `taken`: retried until then)."""
        threading.Thread(target=self._run, args=(bind_timeout_s,), daemon=True, name="handover").start()

    def _bind(self, timeout_s: float) -> socket.socket | None:
        import time

        deadline = time.monotonic() + timeout_s
        while True:
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                server.bind(self.name)
                server.listen(1)
                return server
            except OSError:
                server.close()
                if time.monotonic() > deadline:
                    return None  # no handover offered: the next replacement stops this helper first
                time.sleep(0.05)

    def _run(self, bind_timeout_s: float) -> None:
        server = self._bind(bind_timeout_s)
        if server is None:
            return
        self._server = server
        while True:
            try:
                channel, _ = server.accept()
            except OSError:
                return
            with channel:
                if self._hand_over(channel):
                    server.close()  # frees the name for the replacement's own offer
                    self.handed_over()
                    return

    def _hand_over(self, channel: socket.socket) -> bool:
        if not _trusted(channel):
            return False
        channel.settimeout(ACK_TIMEOUT_S)
        addresses = list(self.listeners)
        try:
            socket.send_fds(channel, [json.dumps(addresses).encode()], [s.fileno() for s in self.listeners.values()])
            return channel.recv(len(TAKEN)) == TAKEN
        except OSError:
            return False  # the replacement died or gave up: keep serving


def _trusted(channel: socket.socket) -> bool:
    """The peer runs as this process's user, or as root, and sees this host's filesystem (its mount namespace):
    nobody else may take the public port's socket, nor hand this helper one. The namespace, as the engines' containers
    run on the host's network and as root: their processes reach the same abstract names with uid 0."""
    pid, uid, _ = struct.unpack("3i", channel.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    if uid not in (os.getuid(), 0):
        return False
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt")
    except OSError:  # gone, in a pid namespace this one does not see (pid 0), or not ours to read: not trusted
        # (so a helper of a user other than root trades no sockets with a root one: it could not stop it either)
        return False
