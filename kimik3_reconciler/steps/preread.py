"""Pre-read the model into the page cache while the old server still serves (issue 15), then say how much of
it the cache holds: a swap right after loads from memory. Never fails the apply: a cache that could not keep
the files only makes the load cold, as it would have been without the step."""

from __future__ import annotations

import threading

from kimik3_reconciler.model.specs import PagecachePreread
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.report import Reporter

GIB = 1 << 30


def preread_model(spec: PagecachePreread, ports: Ports, reporter: Reporter) -> None:
    files = list(spec.files)
    started = ports.clock.monotonic()
    lock, done = threading.Lock(), [0]
    task = f"pre-read {len(files)} model files"

    def on_bytes(n: int) -> None:  # from the reading threads: one reporter call at a time
        with lock:
            done[0] += n
            elapsed = max(ports.clock.monotonic() - started, 1e-6)
            reporter.progress(task, done[0], spec.total_bytes, rate_bps=int(done[0] / elapsed))

    ports.host.preread(files, spec.workers, on_bytes)
    seconds = ports.clock.monotonic() - started
    resident = ports.host.resident_bytes(files)
    share = resident / spec.total_bytes if spec.total_bytes else 1.0
    reporter.event("pre-read", files=len(files), gib=round(spec.total_bytes / GIB, 2), seconds=round(seconds, 2),
                   gib_per_s=round(spec.total_bytes / GIB / seconds, 2) if seconds > 0 else None,
                   resident=f"{100 * share:.1f} %", workers=spec.workers)
    if share < 0.9:
        # Memory ran short after the plan looked (another process grew): the load reads the rest from disk.
        reporter.event("pre-read-short", resident=f"{100 * share:.1f} %",
                       why="the page cache kept less than 90 % of the model: the swap's load is partly cold")
