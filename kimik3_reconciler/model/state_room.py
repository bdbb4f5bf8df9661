"""The room an apply needs in the state dir once it takes a server down (issue 30), pure.

An apply that stops or replaces the serving container still has records to write: the launch's `unverified/`
record, the exporter's config and process records, the workers record, the gate's result, the last good profile
at its end. A full state dir used to fail one of those *after* the old server was gone (exit 8, nothing serving).
So the orchestrator asks, before the first step that takes a server down, whether the state dir holds every record the
rest of the apply must write (`shortfall`). Statistics (load rates, a load's seconds, the apply record, the last
verify report) are not counted: their writes warn and carry on (steps/statistic.py), so they never need room.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kimik3_reconciler.model.plan import Step
from kimik3_reconciler.model.specs import (
    ExporterRun,
    ExporterUnit,
    MemberLaunch,
    MemberRemove,
    Payload,
    QuantGateRun,
    WorkerLaunch,
    WorkerRemove,
)

# Upper bounds of the small records whose content is only known when they are written (a date, a pid).
UNVERIFIED_BYTES = 256  # {"fingerprint": 64 hex, "date"}
WORKER_ENTRY_BYTES = 512  # one {"name", "docker", "tls_dir", "container"} of rpc-workers/<name>.json
PROCESS_BYTES = 512  # the exporter's process record beside its config: pid or unit, fingerprint, date
GATE_RESULT_BYTES = 4096  # one image's entry in gate/...json: verdict, report numbers, date


@dataclass(frozen=True)
class StateRoom:
    """What the state dir's file system has left (statvfs): bytes and files (None: no inode limit)."""

    path: str
    free_bytes: int
    block_bytes: int
    free_files: int | None = None


def takes_server_down(spec: Payload | None) -> bool:
    """A step after which no server may answer until a later launch is healthy: the payload says so
    (`Payload.takes_server_down`: the replacement of the profile's container or of a worker, a stop of ours before
    the gate or of a conflicting profile's server and its unit, a unit's or a container's removal)."""
    return spec is not None and spec.takes_server_down()


def _size(value: dict[str, Any]) -> int:
    return len(json.dumps(value, indent=1, sort_keys=True).encode())  # as StateFiles.write lays it out


def step_records(spec: Payload | None, workers: int) -> tuple[tuple[str, int], ...]:
    """(record, bytes at most) that this step's executor writes to the state dir and must not fail to."""
    if spec is not None and spec.starts_server:  # the launch's or start's `unverified/` record
        return (("unverified", UNVERIFIED_BYTES),)
    if isinstance(spec, (WorkerLaunch, WorkerRemove)):
        return (("rpc-workers", WORKER_ENTRY_BYTES * max(workers, 1)),)
    if isinstance(spec, (MemberLaunch, MemberRemove)):  # steps/cluster.py: the same entries, another record
        return (("cluster-members", WORKER_ENTRY_BYTES * max(workers, 1)),)
    if isinstance(spec, (ExporterRun, ExporterUnit)):
        config = _size(spec.config)
        return (("metrics config", config), ("metrics process", config + PROCESS_BYTES))
    if isinstance(spec, QuantGateRun):
        return (("gate result", GATE_RESULT_BYTES),)
    return ()


def records_after(steps: Sequence[Step], last_good: dict[str, Any] | None, workers: int) -> tuple[tuple[str, int], ...]:
    """Every record the apply writes from the first of `steps` on, and at its end: the last good profile (`last_good`:
    the record as it would be written; None when this apply writes none) and, with RPC workers, their record."""
    records = [record for step in steps for record in step_records(step.spec, workers)]
    if last_good is not None:
        records.append(("last-good", _size(last_good)))
    if workers:
        records.append(("rpc-workers", WORKER_ENTRY_BYTES * workers))
    return tuple(records)


def needed_bytes(records: Sequence[tuple[str, int]], block_bytes: int) -> int:
    """Each record written atomically: its new file whole (the old one is freed only by the rename) in whole blocks,
    plus one block for a folder it may have to make."""
    block = max(block_bytes, 1)
    return sum((-(-size // block) + 1) * block for _, size in records)


def shortfall(room: StateRoom, records: Sequence[tuple[str, int]]) -> str | None:
    """Why the state dir cannot take `records` (bytes or files short), or None when it can."""
    need = needed_bytes(records, room.block_bytes)
    names = ", ".join(sorted({name for name, _ in records}))
    if need > room.free_bytes:
        return (
            f"{room.path}: {_kib(room.free_bytes)} free, but after it stops the server this apply must write "
            f"{len(records)} record(s) there ({names}: {_kib(need)})"
        )
    files = 2 * len(records)  # a temp file and a folder each, at most
    if room.free_files is not None and files > room.free_files:
        return (
            f"{room.path}: {room.free_files} free inode(s), but after it stops the server this apply must write "
            f"{len(records)} record(s) there ({names})"
        )
    return None


def _kib(size: int) -> str:
    return f"{size / 1024:.1f} KiB"
