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
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

CHUNK = 16 << 20
# Chunks handed to the readers ahead of the ones they read: a few per worker keeps them busy, and a stop (or the
# interpreter's exit, which runs every queued chunk of a pool) never waits for more than these.
AHEAD_PER_WORKER = 2


def _chunks(paths: Iterable[str], limit: int | None = None) -> Iterator[tuple[str, int, int]]:
    """The files' chunks in order; with `limit`, only the first `limit` bytes of them all (a partial pre-read: the
    files in the order the server opens them, the last one up to where the limit falls)."""
    left = limit
    for path in paths:
        size = os.path.getsize(path)
        for offset in range(0, size, CHUNK):
            length = min(CHUNK, size - offset)
            if left is not None:
                if left <= 0:
                    return
                length = min(length, left)
                left -= length
            yield path, offset, length


def preread(
    paths: list[str],
    workers: int,
    on_bytes: Callable[[int], None],
    method: str = "read",
    stop: threading.Event | None = None,
    limit: int | None = None,
) -> None:
    """Bring every byte of `paths` into the page cache (with `limit`: their first `limit` bytes, in order),
    `workers` chunks at a time; `on_bytes(n)` after each chunk (from worker threads). Files are opened once each, shared by the workers (pread has no file offset).
    Returns early, the rest unread, once `stop` is set; a chunk that raises (`on_bytes` too) ends the read and
    is raised here. Either way at most `workers` chunks are read after it: queued chunks are not read."""
    fds = {path: os.open(path, os.O_RDONLY) for path in dict.fromkeys(paths)}
    local = threading.local()
    halt = threading.Event()  # a chunk failed: the others are not read

    def stopped() -> bool:
        return halt.is_set() or (stop is not None and stop.is_set())

    try:

        def one(chunk: tuple[str, int, int]) -> None:
            if stopped():  # checked by each reader before its read: a stop drops what is queued
                return
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

        ahead = max(1, workers) * AHEAD_PER_WORKER
        with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="kimik3-preread") as pool:
            pending: set[Future[None]] = set()
            try:
                # A bounded window, not every chunk queued up front: a pool's queue is run to its end at
                # interpreter exit, which on an 800 GB model would be a full read before the process leaves.
                for chunk in _chunks(fds, limit):
                    if stopped():
                        break
                    if len(pending) >= ahead:
                        finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                        for future in finished:
                            future.result()  # a chunk's error (the build a pre-read runs alongside failed)
                    pending.add(pool.submit(one, chunk))
                for future in wait(pending).done:
                    future.result()
            except BaseException:
                halt.set()
                pool.shutdown(wait=True, cancel_futures=True)
                raise
        if method == "fadvise" and not stopped() and limit is None:
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
    """Bytes of `path` in the page cache now: mincore, as the exporter reads it (host_linux.page_cache_bytes)."""
    found = resident(path)
    return found[0] if found else 0


_WINDOW = 1 << 30
# mincore sets bit 0 of a page's byte when it is resident (the other bits are reserved): counted in C, ~10x a
# Python loop (an 800 GB model is 200 M pages: ~1 s instead of ~11 s per residency check).
_LOW_BIT = bytes(i & 1 for i in range(256))


def resident(path: str) -> tuple[int, int] | None:
    """(bytes of `path` in the page cache, its size), by mincore(2) over 1 GiB windows of a read-only mapping (what
    fincore does; nothing is read or faulted in). None: unreadable."""
    import ctypes
    import mmap

    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype, libc.mmap.argtypes = (
        ctypes.c_void_p,
        [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long],
    )
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    page = mmap.PAGESIZE
    try:
        size = os.fstat(fd).st_size
        cached = 0
        for offset in range(0, size, _WINDOW):
            length = min(_WINDOW, size - offset)
            address = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, offset)
            if address in (None, ctypes.c_void_p(-1).value):
                return None
            try:
                pages = (length + page - 1) // page
                vector = ctypes.create_string_buffer(pages)
                if libc.mincore(address, length, vector) != 0:
                    return None
                cached += vector.raw.translate(_LOW_BIT).count(1) * page
            finally:
                libc.munmap(address, length)
        return min(cached, size), size
    finally:
        os.close(fd)


def evict(path: str) -> None:
    """Drop `path`'s clean pages from the page cache (posix_fadvise DONTNEED; dirty pages are synced first)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
