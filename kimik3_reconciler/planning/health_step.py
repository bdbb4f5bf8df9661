"""Plan the readiness wait: "healthy" means /health answers 200, i.e. the model is loaded."""

from __future__ import annotations

from kimik3_reconciler.model.builtin_patches import builtin_patches_for
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.humanize import SEED_LOAD_BYTES_PER_S, duration, gib
from kimik3_reconciler.model.plan import Action, Step
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.specs import HealthWait, PagecachePreread
from kimik3_reconciler.planning.container_step import container_changes
from kimik3_reconciler.planning.desired import Desired

# Seed 000 measured ~17 min to read 802 GB (--load-mode none reads everything up front), i.e.
# ~0.8 GB/s; allow a quarter of that before calling a load stuck.
_LOAD_BYTES_PER_S = 200 * (1 << 20)
_STARTUP_S = 120.0
# Issue 15 (H200, 36 GB synthetic K3): a warm load took 0.23-0.32x the cold one all-VRAM (6.7-8.6 s vs
# 26.6-29.7 s), 0.56-0.87x with the experts on the CPU (its pinned allocation, not the read, is the cost).
# With kimik3's parallel-pin patch (2026-12-03, H200, 16 GB synthetic, tests/fixtures/h200/load-h200.json) a
# hybrid reload after a pre-read took 0.53x the cold one (7.2 s vs 13.7 s downtime).
# Used until this host has measured a warm load of its own.
WARM_FRACTION = {"all-vram": 0.33, "hybrid": 0.55}
# With kimik3's parallel-host-read patch too (a CUDA default; same host and model, tests/fixtures/h200/
# read-patch-h200.json): the page cache is copied into the CPU experts' buffer by 8 threads, and a hybrid reload
# after a pre-read took 0.28x the cold one (2.9 s vs 10.3 s; 0.20x at 40.66 GB). All-VRAM has no host tensors to
# read: its fraction is the one above.
WARM_FRACTION_PARALLEL_READ = {"hybrid": 0.3}


def reads_in_parallel(profile: Profile) -> bool:
    """Does the server copy its host tensors with kimik3's parallel-host-read patch: built into the image (its
    variant's default, or named), and not turned off at run time (`serve.env` KIMIK3_PARALLEL_READ=0)?"""
    built = any(
        p.name == "parallel-host-read"
        for p in builtin_patches_for(profile.build.variant, profile.build.builtin_patches)
    )
    return built and profile.serve.env.get("KIMIK3_PARALLEL_READ") != "0"


def preread_planned(planned: tuple[Step, ...]) -> bool:
    """A pre-read step reads the model before the launch (after the image build read it, or on its own)."""
    return any(s.changes and isinstance(s.spec, PagecachePreread) for s in planned)


def partial_preread(planned: tuple[Step, ...]) -> int | None:
    """Bytes a partial pre-read step leaves in the page cache before the launch; None when none is planned."""
    return next(
        (
            s.spec.limit_bytes
            for s in planned
            if s.changes and isinstance(s.spec, PagecachePreread) and s.spec.limit_bytes is not None
        ),
        None,
    )


def predicted_partial_load_s(
    observed: Observed, cached_bytes: int, mode: str = "hybrid", parallel_read: bool = False
) -> tuple[float, str]:
    """Seconds to load when the page cache holds only `cached_bytes` of the model (a partial pre-read): those
    at the warm load's speed, the rest at the cold one's (each from this host's records, else as
    predicted_load_s says)."""
    size = observed.model.total_bytes
    cached = min(max(cached_bytes, 0), size)
    share = cached / size if size else 1.0
    warm_s, _ = predicted_load_s(observed, True, mode, parallel_read)
    cold_s, _ = predicted_load_s(observed, False, mode, parallel_read)
    warm_source = "measured here" if observed.warm_load_rate else "issue 15's warm/cold ratio"
    cold_source = "measured here" if observed.load_rate else "seed 000's rate"
    seconds = share * warm_s + (1 - share) * cold_s
    return seconds, (
        f"partial pre-read: {gib(cached)} from the page cache at the warm rate ({warm_source}) + "
        f"{gib(size - cached)} from disk at the cold rate ({cold_source})"
    )


def load_timeout(total_bytes: int, startup_s: float = _STARTUP_S) -> float:
    """The health wait's limit: the engine's startup allowance plus the bytes at a quarter of seed 000's rate."""
    return startup_s + total_bytes / _LOAD_BYTES_PER_S


def predicted_load_s(
    observed: Observed, warm: bool = False, mode: str = "hybrid", parallel_read: bool = False
) -> tuple[float, str]:
    """Seconds to load the model, from the last load measured on this host (else seed 000's rate); `warm`:
    after a pre-read, from the last warm load measured here (else the cold figure scaled by issue 15's ratio,
    the parallel-host-read patch's when the server has it)."""
    size = observed.model.total_bytes
    if warm and observed.warm_load_rate:
        rate = observed.warm_load_rate
        return size / rate, f"{gib(size)} from the page cache at {gib(int(rate))}/s, measured here"
    rate = observed.load_rate or SEED_LOAD_BYTES_PER_S
    source = "measured here" if observed.load_rate else "seed 000's 802 GB in ~17 min"
    if warm:
        fraction = (WARM_FRACTION_PARALLEL_READ if parallel_read else {}).get(mode, WARM_FRACTION.get(mode, 1.0))
        patched = ", parallel-host-read" if parallel_read and mode in WARM_FRACTION_PARALLEL_READ else ""
        how = (
            f"pre-read: {fraction:g}x the cold {gib(size)} at {gib(int(rate))}/s "
            f"({source}; issue 15's warm/cold ratio, {mode}{patched})"
        )
        return fraction * size / rate, how
    return size / rate, f"{gib(size)} at {gib(int(rate))}/s, {source}"


def predicted_downtime(desired: Desired, observed: Observed, planned: tuple[Step, ...]) -> tuple[float, str]:
    """Seconds from the launch to /health 200: the weights' read (predicted_load_s, or the partial pre-read's),
    plus the engine's fixed start-up where it has one (vLLM, SGLang); there, this container's last launch recorded
    here is the forecast when there is one (issue 38: a vLLM swap was forecast at 0-9 s, every launch took 25-28 s)."""
    ready, server = desired.engine.readiness, desired.engine.server
    if ready.fixed_s and observed.last_load is not None:
        return _recorded_launch_s(observed, ready.fixed_s, server)
    partial, mode, parallel = partial_preread(planned), desired.launch.mode.mode, reads_in_parallel(desired.profile)
    if partial is not None:
        seconds, how = predicted_partial_load_s(observed, partial, mode, parallel)
    else:
        seconds, how = predicted_load_s(observed, preread_planned(planned), mode, parallel)
    if not ready.fixed_s:
        return seconds, how
    return seconds + ready.fixed_s, (
        f"{how} + ~{duration(ready.fixed_s)} of {server}'s start-up, not measured on "
        f"this host yet ({ready.fixed_source})"
    )


def _recorded_launch_s(observed: Observed, fixed_s: float, server: str) -> tuple[float, str]:
    """This container's last launch here, start-up included; another model's bytes moved by the difference at the
    load rate (never below the start-up: a smaller model still starts the engine)."""
    then_bytes, then_s = observed.last_load or (0, 0.0)
    said = f"{server}'s last launch of this container here took {duration(then_s)}, start-up included"
    size = observed.model.total_bytes
    if size == then_bytes:
        return then_s, said
    rate = observed.load_rate or SEED_LOAD_BYTES_PER_S
    source = "measured here" if observed.load_rate else "seed 000's rate"
    seconds = max(then_s + (size - then_bytes) / rate, min(then_s, fixed_s))
    return seconds, (f"{said}, for {gib(then_bytes)}; {gib(size)} now, the difference at {gib(int(rate))}/s ({source})")


def plan_health(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    launch, ready = desired.launch, desired.engine.readiness
    profile = desired.profile
    warm, partial = preread_planned(planned), partial_preread(planned)
    wait = HealthWait(
        container=launch.spec.name,
        url=launch.health_url,
        timeout_s=load_timeout(observed.model.total_bytes, ready.startup_s),
        model_bytes=observed.model.total_bytes,
        warm=warm,
        unit=f"{profile.unit_name}.service" if profile.systemd is not None else None,
        partial_bytes=partial,
        local_model=observed.model.local_path,
        engine=desired.engine.name,
    )
    target = launch.health_url
    if container_changes(planned):
        seconds, how = predicted_downtime(desired, observed, planned)
        return (
            Step(
                "health",
                target,
                Action.READ,
                f"wait for the model to load ({ready.path} 200)",
                spec=wait,
                cost=f"predicted downtime ~{duration(seconds)} ({how}); gives up after {duration(wait.timeout_s)}",
            ),
        )
    container = observed.container
    health = container.health if container else None
    if health == "ok":
        return (Step("health", target, Action.NOOP, f"{ready.path} answers 200: model loaded", spec=wait),)
    # A load already in progress is waited for, never relaunched (an unverified one: verify_step follows).
    why = f"model still loading ({ready.loading})" if health == "loading" else f"{ready.path} not answering yet"
    return (Step("health", target, Action.READ, f"{why}: wait", spec=wait),)
