"""The sources a scrape waits on, each read on its own thread with its own deadline: a scrape answers within
SCRAPE_BOUND_S whatever one source does (issue 30: a scrape waited 92.6 s on Docker's restart window while
Prometheus gives up after 10 s).

A read that misses its deadline is reported late (`kimik3_exporter_source_up{source} 0`) and its series are left
out; nothing from an earlier scrape is served in its place. Its thread is left to finish (a Python thread cannot
be stopped; a hung NVML or NFS read may never return), and no second read of that source starts while it runs: a
later scrape that finds a read in flight waits on it when it began within the source's deadline (two scrapes at
once share one read), and otherwise reports the source late at once. So a hung source costs one thread, not one
per scrape.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

# Seconds each source gets, counted from the moment its read starts. Reads run side by side; only the reads
# that need the container's pid (its RSS, its log line while loading) start after Docker answers.
SOURCE_DEADLINE_S = {
    "docker": 2.0,  # inspect over the local socket: ~1 ms when dockerd is there
    "server_health": 2.0,
    "server_metrics": 2.5,
    "server_slots": 2.5,  # llama-server on this host
    "state": 1.0,  # a few small JSON records in the state dir
    "proc": 1.0,  # /proc/sys/kernel/numa_balancing, /proc/<pid>/status
    "nvml": 2.0,  # a wedged driver can hang NVML calls for minutes
    "page_cache": 2.0,  # mincore over every shard (rate-limited: collect.PAGE_CACHE_EVERY_S)
}
# The whole scrape, the pid-dependent reads included (docker's 2 s, then /proc's 1 s): under Prometheus' default
# scrape_timeout (10 s) with room for the exposition itself.
SCRAPE_BOUND_S = 4.0


@dataclass(frozen=True)
class Reading:
    """What one source gave this scrape: its value, or why not (it raised, or it was late)."""

    source: str
    value: Any = None
    error: str | None = None  # the read raised: its message
    late: bool = False  # it had not returned by its deadline
    seconds: float = 0.0  # how long it took; when late, how long it has been running

    @property
    def answered(self) -> bool:
        return self.error is None and not self.late


@dataclass
class _Read:
    source: str
    started: float
    done: threading.Event = field(default_factory=threading.Event)
    ended: float | None = None
    value: Any = None
    error: str | None = None


class SourceReads:
    """The reads in flight, one per (source, call): shared by every scrape of one collector."""

    def __init__(self, deadlines: dict[str, float] | None = None, bound_s: float = SCRAPE_BOUND_S):
        self.deadlines = dict(SOURCE_DEADLINE_S if deadlines is None else deadlines)
        self.bound_s = bound_s
        self._lock = threading.Lock()
        self._reads: dict[Hashable, _Read] = {}

    def start(self, source: str, call: Callable[..., Any], *args: Hashable) -> _Read:
        """The read of `call(*args)` for `source`: the one in flight, else a new one on its own thread."""
        key = (source, getattr(call, "__qualname__", repr(call)), args)
        with self._lock:
            read = self._reads.get(key)
            if read is not None and not read.done.is_set():
                return read  # in flight: waited on (a concurrent scrape's) or reported late (a hung one's)
            # Only reads in flight are kept: a pid read once and gone leaves nothing behind in a months-long process.
            self._reads = {k: r for k, r in self._reads.items() if not r.done.is_set()}
            read = self._reads[key] = _Read(source, time.monotonic())

        def run() -> None:
            try:
                read.value = call(*args)
            except Exception as exc:  # any error of any source: that source is down, the scrape goes on
                read.error = f"{type(exc).__name__}: {exc}"
            finally:
                read.ended = time.monotonic()
                read.done.set()

        threading.Thread(target=run, name=f"kimik3-scrape-{source}", daemon=True).start()
        return read

    def result(self, read: _Read, scrape_deadline: float) -> Reading:
        """Wait for `read` until its source's deadline (from the read's start) or the scrape's, whichever is
        first; a read that has not returned by then is late."""
        until = min(read.started + self.deadlines.get(read.source, 1.0), scrape_deadline)
        read.done.wait(max(0.0, until - time.monotonic()))
        if not read.done.is_set():
            return Reading(read.source, late=True, seconds=time.monotonic() - read.started)
        seconds = (read.ended or read.started) - read.started
        return Reading(read.source, value=read.value, error=read.error, seconds=seconds)
