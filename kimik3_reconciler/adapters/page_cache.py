"""The page cache, for the pre-read (issue 15): read model files into it in parallel, ask how much of them it
holds (mincore), and evict them (posix_fadvise DONTNEED: one file's clean pages, not the whole cache).

Two ways to pre-read, measured by bench/load.py (its "pre-read alone" rows): `read` (each worker pread()s 16 MiB
chunks into one reused buffer) and `fadvise` (each worker asks for WILLNEED per chunk, then mincore is polled
until the files are resident: WILLNEED only queues readahead, and here it stalled with half the files cached). The pre-read step
uses `read` with 4 workers, the faster here (docs/operations.md "Reloads that hide the read").
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

CHUNK = 16 << 20


def _chunks(paths: Iterable[str]) -> Iterator[tuple[str, int, int]]:
    for path in paths:
        size = os.path.getsize(path)
        for offset in range(0, size, CHUNK):
            yield path, offset, min(CHUNK, size - offset)


def preread(paths: list[str], workers: int, on_bytes: Callable[[int], None], method: str = "read") -> None:
    """Bring every byte of `paths` into the page cache, `workers` chunks at a time; `on_bytes(n)` after each
    chunk (from worker threads). Files are opened once each, shared by the workers (pread has no file offset)."""
    fds = {path: os.open(path, os.O_RDONLY) for path in dict.fromkeys(paths)}
    local = threading.local()
    try:
        def one(chunk: tuple[str, int, int]) -> None:
            path, offset, length = chunk
            fd = fds[path]
            if method == "fadvise":  # queue the readahead; residency is awaited below
                os.posix_fadvise(fd, offset, length, os.POSIX_FADV_WILLNEED)
                on_bytes(length)
                return
            buffer = getattr(local, "buffer", None)
            if buffer is None:
                buffer = local.buffer = bytearray(CHUNK)
            view, done = memoryview(buffer), 0
            while done < length:  # a page already cached costs a copy, not a disk read
                got = os.preadv(fd, [view[done:length]], offset + done)
                if got <= 0:
                    break
                done += got
            on_bytes(length)

        with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="kimik3-preread") as pool:
            # A chunk that raises (`on_bytes` too: the build a pre-read runs alongside failed) ends the loop, and
            # map's iterator cancels the chunks still queued: the rest of the model is not read first.
            for _ in pool.map(one, _chunks(fds)):
                pass
        if method == "fadvise":
            _await_resident(list(fds))
    finally:
        for fd in fds.values():
            os.close(fd)


def _await_resident(paths: list[str], poll_s: float = 0.05, stall_s: float = 2.0) -> None:
    """Until the readahead WILLNEED queued has landed (or stopped landing: memory ran short)."""
    import time

    want = sum(os.path.getsize(p) for p in paths)
    last, since = -1, time.monotonic()
    while True:
        have = sum(resident_bytes(p) for p in paths)
        if have >= want:
            return
        if have != last:
            last, since = have, time.monotonic()
        elif time.monotonic() - since > stall_s:
            return
        time.sleep(poll_s)


def resident_bytes(path: str) -> int:
    """Bytes of `path` in the page cache now: mincore, as the exporter reads it (host_linux._resident)."""
    from kimik3_reconciler.adapters.host_linux import _resident

    found = _resident(path)
    return found[0] if found else 0


def evict(path: str) -> None:
    """Drop `path`'s clean pages from the page cache (posix_fadvise DONTNEED; dirty pages are synced first)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
