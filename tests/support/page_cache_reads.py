"""Real page-cache checks that survive memory pressure: the kernel may drop clean pages of a file at any moment
between a pre-read and mincore's answer (a CI run once found two pages of a 48 MiB file gone), so a test reads
again before it judges what the adapter did. Each `read` must start from an evicted cache: then a try passes on
its own pre-read alone, never on pages an earlier try left behind."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

TRIES = 3


def read_until(read: Callable[[], None], done: Callable[[], bool]) -> bool:
    """`read()` then `done()`, up to TRIES times: whether `done()` ever held. A pre-read that does not bring the
    bytes in fails every try; one whose pages the kernel reclaimed passes on the next."""
    for _ in range(TRIES):
        read()
        if done():
            return True
    return False


def evict(paths: list[Path]) -> None:
    """The files' pages dropped from the page cache (posix_fadvise DONTNEED): only these files, never the shared
    machine's whole cache (drop_caches)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
