"""A unix socket in front of the real Docker daemon's, for one client only (DOCKER_HOST=unix://<path>): it relays
bytes both ways, and on demand plays the daemon gone without touching the shared dockerd: the socket file
removed (`vanish`), a socket nobody accepts on (`refuse`: ECONNREFUSED, what a restarting daemon looks like), or a
daemon that accepts and never answers (`hang`)."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path


class DockerRelay:
    def __init__(self, path: Path, upstream: str):
        self.path, self.upstream = path, upstream
        self.mode = "down"
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()

    # --- modes -------------------------------------------------------------------------------------------

    def forward(self) -> None:
        self._listen("forward")

    def hang(self) -> None:
        self._listen("hang")

    def vanish(self) -> None:
        self._close()
        self.path.unlink(missing_ok=True)
        self.mode = "vanished"

    def refuse(self) -> None:
        self._close()
        self.path.unlink(missing_ok=True)
        dead = socket.socket(socket.AF_UNIX)
        dead.bind(str(self.path))  # the file stays; no listen(): connect() is refused
        dead.close()
        self.mode = "refused"

    # --- the relay ---------------------------------------------------------------------------------------

    def _listen(self, mode: str) -> None:
        self._close()
        self.path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(self.path))
        listener.listen(16)
        self._listener, self.mode = listener, mode
        threading.Thread(target=self._accept, args=(listener, mode), daemon=True).start()

    def _accept(self, listener: socket.socket, mode: str) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed: another mode took over
            with self._lock:
                self._open.append(client)
            if mode == "hang":
                continue  # accepted, never answered
            upstream = socket.socket(socket.AF_UNIX)
            try:
                upstream.connect(self.upstream)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open.append(upstream)
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(1 << 16):
                sink.sendall(chunk)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _close(self) -> None:
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept() (close alone won't)
            except OSError:
                pass
            self._listener.close()
            self._listener = None
        with self._lock:
            for sock in self._open:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
            self._open.clear()

    def close(self) -> None:
        self._close()
        if os.path.lexists(self.path):
            self.path.unlink()
