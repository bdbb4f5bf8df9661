"""Plan the pre-read (issue 15): when the plan swaps a serving container for another, read the model's files
into the page cache first, while the old server still answers, so the new one's load reads memory, not disk.
Decided from facts (MemAvailable, the model's bytes, the running server's RSS, serve.load_mode); the step says
why it pre-reads or why it cannot, and the health step predicts the downtime from the warm rate when it does."""

from __future__ import annotations

from pathlib import PurePosixPath

from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.plan import Action, Step
from kimik3_reconciler.model.specs import (
    LaunchContainer,
    PagecachePreread,
    StopContainer,
)
from kimik3_reconciler.planning.container_step import plan_container
from kimik3_reconciler.planning.desired import Desired
from kimik3_reconciler.planning.humanize import duration, gib
from kimik3_reconciler.planning.launch import repo_dir

# What the kernel and everything else keep besides the cached shards: a tenth of RAM, at least 2 GiB.
RESERVE_FRACTION = 0.10
RESERVE_MIN = 2 << 30
# bench/load.py on the dev machine: 4 parallel 16 MiB readers ~1.0-1.2 GiB/s cold; a plan estimate only.
PREREAD_BYTES_PER_S = 1 << 30


def reserve_bytes(ram_total: int | None) -> int:
    return max(RESERVE_MIN, int((ram_total or 0) * RESERVE_FRACTION))


def model_paths(observed: Observed) -> tuple[str, ...]:
    """The host paths the server opens: the snapshot links of every file of the quant (and mmproj)."""
    model = observed.model
    snapshot = PurePosixPath(repo_dir(model.cache_dir, model.repo)) / "snapshots" / model.revision
    return tuple(str(snapshot / f.path) for f in model.files)


def _swaps_a_serving_container(desired: Desired, observed: Observed, planned: tuple[Step, ...]) -> bool:
    container = observed.container
    if container is None or container.state != "running" or container.health != "ok":
        return False
    if any(s.changes and isinstance(s.spec, StopContainer) and s.spec.name == container.name for s in planned):
        return False  # the quant gate stops it first: no server left to hide the read behind
    return any(isinstance(s.spec, LaunchContainer) and s.spec.replace for s in plan_container(desired, observed))


def plan_preread(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    host, model, container = observed.host, observed.model, observed.container
    if host.ram_available is None or not model.files or not _swaps_a_serving_container(desired, observed, planned):
        return ()  # no swap of a serving container (or memory not observed): nothing to hide the read behind
    target, size = f"{model.repo}/{model.quant}", model.total_bytes
    spec = PagecachePreread(files=model_paths(observed), total_bytes=size)
    if desired.profile.serve.load_mode == "dio":
        # Direct I/O reads around the page cache: a cached copy would not shorten the load, only cost RAM.
        return (Step("preread", target, Action.NOOP, "no pre-read: serve.load_mode dio reads around the page cache "
                     "(the load reads the disk whatever is cached)", spec=spec),)
    reserve = reserve_bytes(host.ram_total)
    rss = container.rss_bytes if container is not None else None
    held = (f"; the running server holds {gib(rss)} (RSS), freed at the swap and taken again by the new one"
            if rss else "")
    if size + reserve > host.ram_available:
        # rule: preread-fits-ram
        # Reading more than MemAvailable evicts the first shards before the load reaches them (or pushes the
        # serving process to swap): the load would read the disk anyway, after a read that only cost time.
        return (Step("preread", target, Action.NOOP, f"cannot pre-read: {gib(size)} of model files + "
                     f"{gib(reserve)} reserve > MemAvailable {gib(host.ram_available)}{held}; the swap's load reads "
                     "the disk (cold)", spec=spec),)
    return (Step("preread", target, Action.READ, f"pre-read {gib(size)} into the page cache while "
                 f"{container.name if container else 'the server'} still serves (MemAvailable "
                 f"{gib(host.ram_available)} ≥ {gib(size)} + {gib(reserve)} reserve{held})", spec=spec,
                 cost=f"~{duration(size / PREREAD_BYTES_PER_S)} of reading before the swap, no downtime"),)


def preread_planned(planned: tuple[Step, ...]) -> bool:
    return any(s.changes and isinstance(s.spec, PagecachePreread) for s in planned)
