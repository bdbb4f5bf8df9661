"""One large file over parallel HTTP ranges, into the same `blobs/<sha256>.incomplete` as a plain fetch (issue 15:
a CDN caps each connection far below the disk, and UD-Q2_K_XL-REAP770 is one 697 GiB file).

- The file is cut into `parts` ranges; each is fetched on its own connection and written at its offset
  (pwrite) into the partial, which is sized to the whole file up front.
- `<partial>.ranges` (JSON, replaced atomically every 32 MiB per range and at the end) records how far each
  range got, so a run killed with `kill -9` resumes every range where its record says (bytes written after the
  last record are fetched again). A partial without that record is a plain fetch's prefix: kept, and the rest
  is split into ranges.
- The sha256 is taken in file order by a follower thread that reads the contiguous prefix as the ranges fill it
  (from the page cache, overlapping the download), not by a second full read at the end: bench/download.py
  measured both (docs/operations.md). A resumed file is re-read from its start once, as before.
- Each range retries like a plain fetch (TransientError, resuming); a hub that answers a range with the whole
  body (200) makes the caller fall back to one connection.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

CHUNK = 8 << 20  # hash reads
BLOCK = 1 << 20  # progress and the ranges record advance per this much written (each piece is pwritten as it lands)
RECORD_EVERY = 32 << 20
Progress = Callable[[int], None]  # bytes fetched so far (all ranges)


class RangesIgnored(Exception):
    """The hub answered a range request with the whole body: fetch over one connection instead."""


def split(start: int, size: int, parts: int) -> list[list[int]]:
    """[first, end, done] ranges covering [start, size) in `parts` nearly equal pieces."""
    step = -(-(size - start) // parts)
    return [[a, min(a + step, size), 0] for a in range(start, size, step)] if size > start else []


class RangedPartial:
    """The partial file and its ranges record."""

    def __init__(self, partial: Path, size: int, parts: int):
        self.partial, self.size = partial, size
        self.record = partial.with_name(partial.name + ".ranges")
        self.lock = threading.Condition()
        self.ranges = self._load(parts)
        self.written_since: dict[int, int] = {}

    def _load(self, parts: int) -> list[list[int]]:
        if self.record.exists() and self.partial.exists():
            data = json.loads(self.record.read_text())
            if data.get("size") == self.size:
                return [list(r) for r in data["ranges"]]
        # A plain fetch's partial is a prefix: keep it as one finished range, split the rest.
        kept = self.partial.stat().st_size if self.partial.exists() else 0
        kept = min(kept, self.size)
        ranges = ([[0, kept, kept]] if kept else []) + split(kept, self.size, parts)
        with open(self.partial, "ab") as f:
            os.ftruncate(f.fileno(), self.size)
        self._save(ranges)
        return ranges

    def _save(self, ranges: list[list[int]]) -> None:
        tmp = self.record.with_name(self.record.name + ".tmp")
        tmp.write_text(json.dumps({"size": self.size, "ranges": ranges}))
        os.replace(tmp, self.record)

    @property
    def fetched(self) -> int:
        return sum(r[2] for r in self.ranges)

    def prefix(self) -> int:
        """Bytes from offset 0 that every range has written (what the in-order hash may read)."""
        done = 0
        for first, end, got in sorted(self.ranges):
            if first > done:
                break
            done = first + got
            if first + got < end:
                break
        return done

    def advance(self, index: int, n: int) -> None:
        with self.lock:
            self.ranges[index][2] += n
            self.written_since[index] = self.written_since.get(index, 0) + n
            if self.written_since[index] >= RECORD_EVERY:
                self.written_since[index] = 0
                self._save(self.ranges)
            self.lock.notify_all()

    def finish(self) -> None:
        with self.lock:
            self._save(self.ranges)
            self.lock.notify_all()

    def discard_record(self) -> None:
        self.record.unlink(missing_ok=True)


def recorded_bytes(partial: Path, size: int) -> int | None:
    """The bytes a ranged partial's record says were written (what a resume keeps: the file itself is sized to the
    whole file up front, so its size says nothing), or None when there is no record of this size to read."""
    record = partial.with_name(partial.name + ".ranges")
    try:
        data = json.loads(record.read_text())
        return sum(int(r[2]) for r in data["ranges"]) if data.get("size") == size else None
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):  # absent, torn or edited
        return None


def _fetch_range(
    client: httpx.Client,
    url: str,
    partial: RangedPartial,
    index: int,
    fd: int,
    check: Callable[[httpx.Response], None],
    progress: Progress,
) -> None:
    first, end, got = partial.ranges[index]
    if first + got >= end:
        return
    with client.stream("GET", url, headers={"Range": f"bytes={first + got}-{end - 1}"}) as response:
        check(response)
        if response.status_code == 200:
            raise RangesIgnored(url)
        offset = pending = first + got
        try:
            for piece in response.iter_bytes():  # as received: no re-chunking copy
                piece = piece[: end - offset]
                os.pwrite(fd, piece, offset)
                offset += len(piece)
                if offset - pending >= BLOCK or offset >= end:
                    partial.advance(index, offset - pending)  # recorded only once written
                    pending = offset
                    progress(partial.fetched)
                if offset >= end:
                    break
        finally:  # also when the connection drops: what was written is kept, and said (not "nothing of it")
            if offset > pending:
                partial.advance(index, offset - pending)


def _hash_in_order(partial: RangedPartial, fd: int, digest: hashlib._Hash, stop: threading.Event) -> None:
    """Hash the file from offset 0 as the contiguous prefix grows (it reads the page cache, not the disk)."""
    done = 0
    while done < partial.size:
        with partial.lock:
            while partial.prefix() <= done and not stop.is_set():
                partial.lock.wait(0.5)
            ready = partial.prefix()
        if ready <= done:
            return  # stopped (a range failed): the caller raises
        while done < ready:
            block = os.pread(fd, min(CHUNK, ready - done), done)
            if not block:
                return
            digest.update(block)
            done += len(block)


def fetch_ranges(
    client: httpx.Client,
    url: str,
    partial_path: Path,
    size: int,
    parts: int,
    digest: hashlib._Hash,
    check: Callable[[httpx.Response], None],
    progress: Progress,
    retry: Callable[[Callable[[], None]], None],
    hash_at_end: bool = False,
) -> int:
    """Fill `partial_path` to `size` bytes over `parts` ranges, `digest` updated in file order; returns the
    bytes fetched by this call. `retry(fn)` runs one range with the caller's retry policy."""
    partial = RangedPartial(partial_path, size, parts)
    before = partial.fetched
    fd = os.open(partial_path, os.O_RDWR)
    stop = threading.Event()
    try:
        hasher = (
            None
            if hash_at_end
            else threading.Thread(
                target=_hash_in_order, args=(partial, fd, digest, stop), name="kimik3-range-hash", daemon=True
            )
        )
        if hasher is not None:
            hasher.start()
        try:
            with ThreadPoolExecutor(max_workers=len(partial.ranges) or 1, thread_name_prefix="kimik3-range") as pool:
                futures = [
                    pool.submit(retry, lambda i=i: _fetch_range(client, url, partial, i, fd, check, progress))
                    for i in range(len(partial.ranges))
                ]
                for future in futures:
                    future.result()
        finally:
            partial.finish()
            os.fsync(fd)
            stop.set()
            if hasher is not None:
                hasher.join()
        if hash_at_end:
            offset = 0
            while offset < size:
                block = os.pread(fd, CHUNK, offset)
                if not block:
                    break
                digest.update(block)
                offset += len(block)
    finally:
        os.close(fd)
    partial.discard_record()
    return partial.fetched - before
