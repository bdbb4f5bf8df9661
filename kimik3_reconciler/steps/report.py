"""What executors tell the user while they work (the CLI renders it with rich or as JSON lines)."""

from __future__ import annotations

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
