"""Pre-read the model into the page cache before a launch loads it (issue 15): as its own step while the old
server still serves, or alongside the image build (`preread_alongside`, a background thread while dockerd
compiles). Files the cache already holds are not read again (the step after a build's pre-read only reads what
was evicted since); then say how much of the model the cache holds. Never fails the apply: a cache that could not
keep the files only makes the load cold, as it would have been without the pre-read."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from kimik3_reconciler.model.specs import PagecachePreread
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.report import Reporter, SerialReporter

GIB = 1 << 30
# A file the page cache holds this much of counts as read: re-reading a 50 GB shard for a few evicted pages
# would cost a full copy of it, the load reads those pages from disk in less.
RESIDENT_SHARE = 0.99


class PrereadStopped(Exception):
    """What the pre-read ran alongside failed or was interrupted: it stops after the chunk each reader holds."""


def _gib(n: int) -> float:
    return round(n / GIB, 2)


def _sizes(spec: PagecachePreread, cached: dict[str, tuple[int, int] | None]) -> dict[str, int]:
    """Each file's bytes: as the plan listed them, else as mincore's look found them, else (a plan saved before sizes
    were carried, a file that look could not read) the model's mean file: the progress total stays near the truth."""
    if len(spec.sizes) == len(spec.files):
        return dict(zip(spec.files, spec.sizes, strict=True))
    mean = spec.total_bytes // max(1, len(spec.files))
    return {path: found[1] if found is not None else mean for path, found in cached.items()}


def prefix(files: list[str], sizes: dict[str, int], limit: int | None) -> dict[str, int]:
    """The bytes of each file a pre-read of the first `limit` bytes (files in order) reads: the whole of the
    leading files, part of the one where the limit falls, none of the rest (left out). None: every byte."""
    if limit is None:
        return {path: sizes[path] for path in files}
    left, wanted = limit, {}
    for path in files:
        if left <= 0:
            break
        wanted[path] = min(sizes[path], left)
        left -= wanted[path]
    return wanted


def preread_model(
    spec: PagecachePreread, ports: Ports, reporter: Reporter, stop: threading.Event | None = None
) -> None:
    files = list(spec.files)
    cached = {path: ports.host.page_cache_bytes(path) for path in files}  # (bytes cached, size); None: unknown
    sizes = _sizes(spec, cached)
    span = prefix(files, sizes, spec.limit_bytes)  # bytes of each file this pre-read covers
    goal = sum(span.values())
    # mincore counts a file's cached pages wherever they are: for the partial file, its count against the bytes
    # of it the prefix covers (a cache that holds other pages of it overstates; the load reads those anyway).
    wanted = [
        path
        for path, part in span.items()
        if cached[path] is None or cached[path][0] < RESIDENT_SHARE * min(part, cached[path][1])
    ]
    partial = {} if spec.limit_bytes is None else {"limit_gib": _gib(goal), "of_gib": _gib(spec.total_bytes)}
    if not wanted:
        held = sum(min(c[0], span[p]) for p, c in cached.items() if c and p in span)
        reporter.event(
            "pre-read",
            files=len(span),
            gib=_gib(goal),
            read_files=0,
            seconds=0.0,
            resident=f"{100 * held / goal if goal else 100.0:.1f} %",
            **partial,
            why="already resident: the page cache holds every file, nothing to read",
        )
        return
    todo = goal if len(wanted) == len(span) else sum(span[p] for p in wanted)
    started = ports.clock.monotonic()
    lock, done = threading.Lock(), [0]
    task = f"pre-read {len(wanted)} model files"

    def on_bytes(n: int) -> None:  # from the reading threads: one reporter call at a time
        if stop is not None and stop.is_set():
            raise PrereadStopped  # the adapter drops the chunks still queued
        with lock:
            done[0] += n
            elapsed = max(ports.clock.monotonic() - started, 1e-6)
            reporter.progress(task, done[0], todo, rate_bps=int(done[0] / elapsed))

    if spec.limit_bytes is None:
        ports.host.preread(wanted, spec.workers, on_bytes, stop)
    else:
        # The files before the last one the prefix reaches are whole; only that one is cut: the limit, counted
        # over the files still wanted (the resident ones are skipped, their bytes not counted).
        ports.host.preread(wanted, spec.workers, on_bytes, stop, limit_bytes=todo)
    if stop is not None and stop.is_set():
        raise PrereadStopped  # the adapter returned early: the rest is unread
    seconds = ports.clock.monotonic() - started
    resident = min(ports.host.resident_bytes(list(span)), goal)
    share = resident / goal if goal else 1.0
    reporter.event(
        "pre-read",
        files=len(span),
        gib=_gib(goal),
        read_files=len(wanted),
        read_gib=_gib(todo),
        seconds=round(seconds, 2),
        gib_per_s=round(todo / GIB / seconds, 2) if seconds > 0 else None,
        resident=f"{100 * share:.1f} %",
        workers=spec.workers,
        **partial,
    )
    if share < 0.9:
        # Memory ran short after the plan looked (another process grew): the load reads the rest from disk.
        reporter.event(
            "pre-read-short",
            resident=f"{100 * share:.1f} %",
            why="the page cache kept less than 90 % of what was pre-read: the launch's load is partly cold",
        )


@contextmanager
def preread_alongside(spec: PagecachePreread, ports: Ports, reporter: Reporter, during: str) -> Iterator[Reporter]:
    """Run the pre-read on a thread while the body (`during`: the image build) runs; yield the reporter both
    must use (one call at a time). Joined before leaving: the pre-read finishes after a body that succeeded,
    stops after one that failed and on an interrupt while it waits. Its own failure is reported, never raised: a
    pre-read only warms."""
    shared = SerialReporter(reporter)
    stop, finished, why = threading.Event(), threading.Event(), [f"{during} failed"]

    def read() -> None:
        try:
            preread_model(spec, ports, shared, stop)
        except PrereadStopped:
            shared.event("pre-read-stopped", why=f"{why[0]}: the pre-read stops with it")
        except Exception as error:  # noqa: BLE001 - a pre-read only warms: the build's result stands
            shared.event(
                "pre-read-failed",
                error=f"{type(error).__name__}: {error}",
                why=f"{during} goes on; the pre-read step before the launch reads what is missing",
            )
        finally:
            finished.set()

    thread = threading.Thread(target=read, name="kimik3-preread", daemon=True)
    shared.event("pre-read-alongside", during=during, files=len(spec.files), gib=_gib(spec.total_bytes))
    thread.start()
    try:
        yield shared
    except BaseException as error:
        if not isinstance(error, Exception):  # Ctrl-C, reconcile's SIGTERM (Stopped)
            why[0] = f"{during} was interrupted"
        stop.set()
        raise
    finally:
        try:
            if thread.is_alive() and not stop.is_set():
                shared.event("pre-read-wait", why=f"{during} is done; the pre-read is still reading")
            finished.wait()
        except BaseException:
            # Ctrl-C or SIGTERM while the read outlasts the body: stop it too and wait for the chunks its readers
            # hold (no step outlives its executor call; a reader left running would read the whole model on).
            why[0] = "interrupted while waiting for the pre-read"
            stop.set()
            finished.wait()
            raise
        finally:
            # Waited on `finished`, not by join alone: an interrupted Thread.join marks a running thread stopped
            # (Python 3.11, bpo-45274), and a second join would then return at once.
            thread.join()
