"""Plan the pre-read (issue 15): read the model's files into the page cache before a launch loads them, where the
read can hide behind something: the old server still serving (a swap), or the image build (a compile of minutes
to an hour, which the image step's `ImageBuild.preread` overlaps). With neither, a read before the launch only
moves the load's read in front of it: no gain, and the plan says so.

Decided from facts: MemAvailable, RAM, the model's bytes, the running server's RSS, the new server's host share
(the placement forecast), the compile's jobs (logical CPUs), serve.load_mode, a pending quant gate. The steps say
where the model is read, or why it is not, and the health step predicts the downtime from the warm rate when it is."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.humanize import duration, gib
from kimik3_reconciler.model.plan import Action, Step
from kimik3_reconciler.model.specs import (
    ImageBuild,
    LaunchContainer,
    PagecachePreread,
    StopContainer,
)
from kimik3_reconciler.planning.container_step import container_alone, container_changes
from kimik3_reconciler.planning.desired import Desired, changes
from kimik3_reconciler.planning.health_step import predicted_load_s, predicted_partial_load_s, reads_in_parallel
from kimik3_reconciler.planning.quant_gate import gate_pending

# What the kernel and everything else keep besides the cached shards: a tenth of RAM, at least 2 GiB.
RESERVE_FRACTION = 0.10
RESERVE_MIN = 2 << 30
# bench/load.py on the dev machine: 4 parallel 16 MiB readers ~1.0-1.2 GiB/s cold; a plan estimate only.
PREREAD_BYTES_PER_S = 1 << 30
# A partial pre-read (issue 27) ends on a page boundary. It is planned only when at least a tenth of the model (or
# 1 GiB, whichever is less) fits: less would shorten the load by a few per cent at most (the warm part still costs
# ~0.3x of its cold time), not worth a step that competes with the serving process for memory.
PAGE = 4096
PARTIAL_MIN_BYTES = 1 << 30
PARTIAL_MIN_SHARE = 0.10
# Peak memory of the compile per job while the image builds (Dockerfile.llamacpp: `cmake --build -j$(nproc)`, one
# job per logical CPU, twice the cores on an SMT host): nvcc on llama.cpp's CUDA template instances, g++ on its
# CPU kernels. An estimate: a wrong one only lets the
# compile evict part of the pre-read (page cache is reclaimable), which the pre-read step then reads again.
COMPILE_BYTES_PER_JOB = {"cuda": 2 << 30, "cpu": 1 << 30}


def reserve_bytes(ram_total: int | None) -> int:
    return max(RESERVE_MIN, int((ram_total or 0) * RESERVE_FRACTION))


def model_paths(observed: Observed) -> tuple[str, ...]:
    """The host paths the server opens: the snapshot links of every file of the quant (and mmproj), or the files of
    a local model."""
    model = observed.model
    return tuple(model.host_path(f.path) for f in model.files)


def launch_follows(desired: Desired, observed: Observed) -> bool:
    """Is there a load to warm: a launch is planned, memory was observed, the model's files are listed?"""
    return (
        observed.host.ram_available is not None
        and bool(observed.model.files)
        and container_changes(container_alone(desired, observed))
    )


def preread_spec(observed: Observed, limit_bytes: int | None = None) -> PagecachePreread:
    """Read every file of the quant (with `limit_bytes`: its first that many bytes, files in order), with the
    sizes the listing gave (the progress counts them)."""
    return PagecachePreread(
        files=model_paths(observed),
        total_bytes=observed.model.total_bytes,
        sizes=tuple(f.size for f in observed.model.files),
        limit_bytes=limit_bytes,
    )


def partial_floor(size: int) -> int:
    """The least a partial pre-read is planned for."""
    return min(PARTIAL_MIN_BYTES, int(size * PARTIAL_MIN_SHARE))


def partial_budget(available: int | None, reserve: int, size: int) -> int | None:
    """Bytes of the model the page cache keeps beside the running server (MemAvailable less the reserve), in whole
    pages; None when the whole model fits (no need to cut) or too little room is left to matter."""
    room = (available or 0) - reserve
    if room >= size:
        return None
    room -= room % PAGE
    return room if room >= max(PAGE, partial_floor(size)) else None


def prefix_text(observed: Observed, limit: int) -> str:
    """Which files a pre-read of the first `limit` bytes covers: the whole of the first ones, part of one."""
    names = [PurePosixPath(f.path).name for f in observed.model.files]
    left, whole, cut = limit, [], ""
    for name, f in zip(names, observed.model.files, strict=True):
        if left >= f.size:
            whole.append(name)
            left -= f.size
            continue
        if left > 0:
            cut = f"{name} up to {gib(left)} of {gib(f.size)}"
        break
    rest = len(names) - len(whole) - (1 if cut else 0)
    parts = [
        f"{len(whole)} file(s) whole ({whole[0]}{'…' + whole[-1] if len(whole) > 1 else ''})" if whole else "",
        cut,
        f"{rest} file(s) not at all" if rest else "",
    ]
    return ", ".join(p for p in parts if p)


def _stopped_for_gate(observed: Observed, planned: tuple[Step, ...]) -> bool:
    container = observed.container
    return container is not None and any(
        s.changes and isinstance(s.spec, StopContainer) and s.spec.name == container.name for s in planned
    )


def _swaps_a_serving_container(desired: Desired, observed: Observed, planned: tuple[Step, ...]) -> bool:
    container = observed.container
    if container is None or not container.serving:
        return False
    if _stopped_for_gate(observed, planned):
        return False  # the quant gate stops it first: no server left to hide the read behind
    return any(isinstance(s.spec, LaunchContainer) and s.spec.replace for s in container_alone(desired, observed))


def _idle(observed: Observed) -> str:
    """Why no server is there to hide a read behind."""
    container = observed.container
    if container is None:
        return "no server runs"
    if container.up:
        return f"{container.name} does not serve (/health: {container.health or 'no answer'})"
    return f"{container.name} is {container.state}"


@dataclass(frozen=True)
class BuildOverlap:
    """Whether the image build reads the model into the page cache while it compiles: `spec` when it does,
    `reason` either way (why it does, or why not)."""

    spec: PagecachePreread | None
    reason: str


def _compile_bytes(desired: Desired, observed: Observed) -> tuple[int, str]:
    host = observed.host
    jobs = host.logical_cpus or host.physical_cores  # `-j$(nproc)`; not observed (a pure test): the cores
    per_job = COMPILE_BYTES_PER_JOB.get(desired.profile.build.variant, COMPILE_BYTES_PER_JOB["cuda"])
    return per_job * jobs, f"the compile ({jobs} CPUs × ~{gib(per_job)})"


def _new_server_bytes(desired: Desired, observed: Observed) -> tuple[int, str]:
    """Host memory the new server takes as it loads, when no running server frees its own at a swap."""
    # The engine's plan holds the forecast when it is this plan's observation (the plan's lines read the same one).
    mine = desired.plan is not None and desired.plan.observed is observed
    placed = desired.plan.forecast if mine else desired.engine.render_plan(desired.profile, observed).forecast
    if placed is None:
        # Unknown placement: count every byte as host memory (the CPU variant, or all experts on the CPU).
        return observed.model.total_bytes, "the new server (no placement forecast: the whole model)"
    return placed.host_bytes, f"the new server's host share ({placed.mode}, placement forecast)"


def build_overlap(desired: Desired, observed: Observed) -> BuildOverlap | None:
    """Asked by the image planner when it builds: does its build pre-read the model? None: nothing to decide
    (no launch follows the build, memory not observed, no model files listed). Decided once per plan: the
    pre-read planner asks again for its "why not" text."""
    return desired.answer("build overlap", observed, lambda: _build_overlap(desired, observed))


def _build_overlap(desired: Desired, observed: Observed) -> BuildOverlap | None:
    if not launch_follows(desired, observed):
        return None
    host, model = observed.host, observed.model
    if desired.profile.serve.load_mode == "dio":
        return BuildOverlap(None, "serve.load_mode dio reads around the page cache")
    if gate_pending(desired, observed) and desired.engine.quant_scorer is not None:
        # The gate's scorer runs (the reference quant's included) come between the build and the launch and take
        # the memory: what the build read would be evicted before the launch reads it.
        return BuildOverlap(
            None,
            f"the quant gate's {desired.engine.quant_scorer.program} runs (the reference quant's too) come between "
            "the build and the launch",
        )
    size, reserve = model.total_bytes, reserve_bytes(host.ram_total)
    compile_bytes, compile_why = _compile_bytes(desired, observed)
    # The swapped server's RSS is outside MemAvailable and freed at the swap (the new one takes it again); with
    # none serving, the new server's host share comes out of MemAvailable while the cache still holds the model.
    server_bytes, server_why = (
        (0, "") if _swaps_a_serving_container(desired, observed, ()) else _new_server_bytes(desired, observed)
    )
    # The compile is over before the load starts: the larger of the two shares the memory with the cache.
    peak, peak_why = max((compile_bytes, compile_why), (server_bytes, server_why))
    need = f"{gib(size)} of model files + {gib(reserve)} reserve + ~{gib(peak)} for {peak_why}"
    if size + reserve + peak > host.ram_available:
        # rule: preread-fits-ram
        # Reading more than MemAvailable leaves while the compile (or the new server) takes its share evicts the
        # first shards before the load reaches them: a read that only cost time.
        return BuildOverlap(None, f"{need} > MemAvailable {gib(host.ram_available)}")
    return BuildOverlap(
        preread_spec(observed),
        f"the build pre-reads {gib(size)} into the page cache while it compiles (MemAvailable "
        f"{gib(host.ram_available)} ≥ {need})",
    )


def _read_during_build(planned: tuple[Step, ...]) -> bool:
    return any(s.changes and isinstance(s.spec, ImageBuild) and s.spec.preread is not None for s in planned)


def plan_preread(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    if not launch_follows(desired, observed):
        return ()  # no launch follows (or memory not observed): no load to warm
    host, model, container = observed.host, observed.model, observed.container
    target, size = model.local_path or f"{model.repo}/{model.quant}", model.total_bytes
    spec = preread_spec(observed)
    swap = _swaps_a_serving_container(desired, observed, planned)
    name = container.name if container else "the server"
    if _read_during_build(planned):
        # The build read it (or is reading it) already: this step only finds what the cache lost since (the
        # compile's memory, another process) and reads that, files the cache holds are not read again.
        where = f"before the swap ({name} still serves)" if swap else "before the launch"
        return (
            Step(
                "preread",
                target,
                Action.READ,
                f"the image build pre-reads {gib(size)} into the page cache "
                f"while it compiles; {where}: read only the files the cache lost since",
                spec=spec,
                cost="a residency check (mincore); evicted files are read again, no downtime",
            ),
        )
    overlap = build_overlap(desired, observed) if changes(planned, ImageBuild) else None
    if not swap:
        idle = f"the quant gate stops {name} first" if _stopped_for_gate(observed, planned) else _idle(observed)
        during = (
            f"not during the image build ({overlap.reason})" if overlap is not None else "no image build runs first"
        )
        return (
            Step(
                "preread",
                target,
                Action.NOOP,
                f"no pre-read: {during}, and {idle}: a read before the launch "
                "would only move the load's read in front of it",
                spec=spec,
            ),
        )
    if desired.profile.serve.load_mode == "dio":
        # Direct I/O reads around the page cache: a cached copy would not shorten the load, only cost RAM.
        return (
            Step(
                "preread",
                target,
                Action.NOOP,
                "no pre-read: serve.load_mode dio reads around the page cache "
                "(the load reads the disk whatever is cached)",
                spec=spec,
            ),
        )
    reserve = reserve_bytes(host.ram_total)
    rss = container.rss_bytes if container is not None else None
    held = (
        f"; the running server holds {gib(rss)} (RSS), freed at the swap and taken again by the new one" if rss else ""
    )
    if size + reserve > host.ram_available:
        # rule: preread-fits-ram
        # Reading more than MemAvailable evicts the first shards before the load reaches them (or pushes the
        # serving process to swap): the load would read the disk anyway, after a read that only cost time.
        need = f"{gib(size)} of model files + {gib(reserve)} reserve > MemAvailable {gib(host.ram_available)}{held}"
        budget = partial_budget(host.ram_available, reserve, size)
        if budget is None:
            return (
                Step(
                    "preread",
                    target,
                    Action.NOOP,
                    f"cannot pre-read: {need}; less than "
                    f"{gib(partial_floor(size))} would fit beside the reserve: the swap's load reads the disk "
                    "(cold)",
                    spec=spec,
                ),
            )
        after = f"; not during the image build: {overlap.reason}" if overlap is not None else ""
        return (partial_step(desired, observed, target, name, budget, need + after),)
    after_build = f"; not during the image build: {overlap.reason}" if overlap is not None else ""
    return (
        Step(
            "preread",
            target,
            Action.READ,
            f"pre-read {gib(size)} into the page cache while "
            f"{name} still serves (MemAvailable {gib(host.ram_available)} ≥ {gib(size)} + {gib(reserve)} "
            f"reserve{held}){after_build}",
            spec=spec,
            cost=f"~{duration(size / PREREAD_BYTES_PER_S)} of reading before the swap, no downtime",
        ),
    )


def partial_step(desired: Desired, observed: Observed, target: str, name: str, budget: int, why: str) -> Step:
    """Pre-read what fits (issue 27): the first `budget` bytes of the files in order, the start of the model the
    new server reads first (llama.cpp opens the shards in order and reads each buffer's tensors in file order), so
    the cached part is consumed before the load's own disk reads of the rest fill the cache and evict it."""
    size, mode = observed.model.total_bytes, desired.launch.mode.mode
    parallel = reads_in_parallel(desired.profile)
    seconds, how = predicted_partial_load_s(observed, budget, mode, parallel)
    cold_s, _ = predicted_load_s(observed, False, mode, parallel)
    warm_s, _ = predicted_load_s(observed, True, mode, parallel)
    return Step(
        "preread",
        target,
        Action.READ,
        f"pre-read part of the model: {why}, so only the first {gib(budget)} of {gib(size)} "
        f"({100 * budget / size:.0f} %: {prefix_text(observed, budget)}) into the page cache while {name} "
        f"still serves; the other {gib(size - budget)} the swap's load reads from disk",
        spec=preread_spec(observed, budget),
        cost=f"~{duration(budget / PREREAD_BYTES_PER_S)} of reading before the swap; predicted downtime "
        f"~{duration(seconds)} ({how}), against ~{duration(cold_s)} cold and ~{duration(warm_s)} with "
        "the whole model pre-read",
    )
