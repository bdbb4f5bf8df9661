"""Pure parser of a process's I/O counters (`/proc/<pid>/io`): what the load progress and the warm/cold verdict
read. (Its resident memory, which the pre-read decision weighs, is HostPort.process_rss.)"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProcessIo:
    """`rchar`: bytes the process read through read()/pread() (page cache or disk); `read_bytes`: the part
    the block layer fetched from storage (0 for a load served by the page cache)."""

    rchar: int
    read_bytes: int


def parse_proc_io(text: str) -> ProcessIo | None:
    """`/proc/<pid>/io` as read; None when unreadable (another user's process, or gone)."""
    fields = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if value.strip().isdigit():
            fields[name.strip()] = int(value)
    if "rchar" not in fields:
        return None
    return ProcessIo(rchar=fields["rchar"], read_bytes=fields.get("read_bytes", 0))
