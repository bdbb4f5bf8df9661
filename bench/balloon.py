"""A balloon (issue 27, bench/load.py --partial-preread): a process that holds BYTES of RAM so that the model does
not fit in the page cache twice, the way the seed's 802 GiB model does not on its 1 TiB host.

    python3 bench/balloon.py BYTES

The memory is anonymous (mmap), locked with mlock(2) where the kernel allows it (root, or RLIMIT_MEMLOCK large
enough), else touched page by page (every page written once: with no swap, the kernel can reclaim none of it either).
Prints one JSON line once it holds the memory ({"bytes", "how": "mlock" | "touched", "seconds", "swap_total"}),
then holds it until stdin closes or SIGTERM.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import mmap
import signal
import sys
import time
from pathlib import Path

TOUCH = 64 << 20  # bytes written per slice when the memory is touched rather than locked


def swap_total() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("SwapTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def hold(size: int) -> tuple[mmap.mmap, str]:
    """`size` bytes of anonymous memory, resident: locked if mlock succeeds, else every page written once."""
    region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    address = ctypes.addressof(ctypes.c_char.from_buffer(region))
    # mlock faults every page in and keeps it: nothing of it can be reclaimed, even with swap
    if libc.mlock(ctypes.c_void_p(address), ctypes.c_size_t(size)) == 0:
        return region, "mlock"
    ones = b"\1" * TOUCH
    for offset in range(0, size, TOUCH):
        n = min(TOUCH, size - offset)
        region[offset : offset + n] = ones[:n]
    return region, "touched"


def main() -> None:
    size = int(float(sys.argv[1]))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    started = time.monotonic()
    region, how = hold(size) if size > 0 else (None, "none")  # noqa: F841 - held by being referenced
    print(
        json.dumps(
            {"bytes": size, "how": how, "seconds": round(time.monotonic() - started, 2), "swap_total": swap_total()}
        ),
        flush=True,
    )
    sys.stdin.read()  # held until the parent closes stdin (or ends this process); the exit frees `region`


if __name__ == "__main__":
    main()
