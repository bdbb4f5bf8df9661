"""What executors tell the user while they work (the CLI renders it with rich or as JSON lines)."""

from __future__ import annotations

import threading
from typing import Protocol


class Reporter(Protocol):
    # `fields`: what a bar cannot show by itself, e.g. rate_bps and eta_s of a load (JSON events carry them)
    def progress(self, task: str, done: int, total: int, **fields: object) -> None: ...
    def line(self, source: str, text: str) -> None: ...
    def event(self, name: str, **fields: object) -> None: ...


class NullReporter:
    def progress(self, task: str, done: int, total: int, **fields: object) -> None:
        pass

    def line(self, source: str, text: str) -> None:
        pass

    def event(self, name: str, **fields: object) -> None:
        pass


class SerialReporter:
    """One call at a time into `inner`, for an executor that reports from more than one thread (the image build's
    lines while the pre-read running alongside it reports its progress)."""

    def __init__(self, inner: Reporter):
        self._inner, self._lock = inner, threading.Lock()

    def progress(self, task: str, done: int, total: int, **fields: object) -> None:
        with self._lock:
            self._inner.progress(task, done, total, **fields)

    def line(self, source: str, text: str) -> None:
        with self._lock:
            self._inner.line(source, text)

    def event(self, name: str, **fields: object) -> None:
        with self._lock:
            self._inner.event(name, **fields)
