"""Fault injection for the fixture hub: cut connections, 404 one file, throttle, count bytes served.

The download tests need a hub that misbehaves the way a real one does over 800 GB: a dropped
connection mid-shard, a file the listing names but the CDN can't serve, a slow link. Every body
the hub sends goes through `HubFaults.send`, which also counts the bytes served per path (so a
test can assert a resume refetched at most one chunk).
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from typing import BinaryIO

_CHUNK = 1 << 20


@dataclass
class HubFaults:
    cut_after: dict[str, int] = field(default_factory=dict)  # path -> bytes to send, then drop the connection
    cuts_left: dict[str, int] = field(default_factory=dict)  # path -> how many more GETs get cut (default 1)
    missing: set[str] = field(default_factory=set)  # listed, but resolve answers 404
    bytes_per_second: int | None = None  # throttle every body
    served: dict[str, int] = field(default_factory=dict)  # path -> body bytes sent so far
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _count(self, path: str, n: int) -> None:
        with self._lock:
            self.served[path] = self.served.get(path, 0) + n

    def _cut_for(self, path: str) -> int | None:
        with self._lock:
            if path not in self.cut_after or self.cuts_left.get(path, 1) <= 0:
                return None
            self.cuts_left[path] = self.cuts_left.get(path, 1) - 1
            return self.cut_after[path]

    def send(self, sock: socket.socket, handle: BinaryIO, path: str, offset: int, length: int) -> None:
        """Send `length` bytes of `handle` from `offset`, misbehaving as configured."""
        cut = self._cut_for(path)
        limit = length if cut is None else min(length, cut)
        handle.seek(offset)
        sent = 0
        while sent < limit:
            block = handle.read(min(_CHUNK, limit - sent))
            if not block:
                break
            sock.sendall(block)
            sent += len(block)
            self._count(path, len(block))
            if self.bytes_per_second:
                time.sleep(len(block) / self.bytes_per_second)
        if cut is not None and sent < length:
            sock.shutdown(socket.SHUT_RDWR)  # the connection drops mid-body, as a flaky link does
            raise ConnectionResetError(f"fault: cut {path} after {sent} bytes")
