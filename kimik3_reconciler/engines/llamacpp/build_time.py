"""The image build's predicted duration (issue 27 item 7): from the last full compile measured on this host for the
profile's variant (state record `host/build-time-<variant>.json`, written by steps/image.py), else a stated
default scaled to this host's CPUs; a build that Docker's layer cache answers is told apart (its own record)."""

from __future__ import annotations

from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.humanize import duration
from kimik3_reconciler.model.profile import Profile

# Defaults before the first build here: (seconds, CPUs it ran on, what it was), one CUDA architecture.
# cuda: sm_90, natively on the 16-CPU H200 host with kimik3's cmake arguments, 271 s (tests/fixtures/h200/build.txt;
# in Docker on a 2-CPU machine shared with other work it took 6654 s: docs/operations.md "The CUDA image").
# cpu: the CPU image in Docker on 2 CPUs, ~8 min (docs/operations.md: "the CPU build, ~8 min alone on 2 cores").
DEFAULT_COMPILE = {"cuda": (271.0, 16, "sm_90 on a 16-CPU H200 host"), "cpu": (480.0, 2, "the CPU image on 2 CPUs")}


def default_compile_s(profile: Profile, cpus: int) -> tuple[float, str]:
    """Seconds a first full compile is predicted to take here, and how that figure was made."""
    seconds, ref_cpus, what = DEFAULT_COMPILE.get(profile.build.variant, DEFAULT_COMPILE["cuda"])
    how = f"kimik3's default before a build is measured here: {duration(seconds)} for {what}"
    # Fewer CPUs than the reference: `-j$(nproc)` compiles that many files at once, so the compile takes longer in
    # proportion. More CPUs are not counted as faster: the CUDA link and the largest kernels do not split.
    if cpus < ref_cpus:
        seconds *= ref_cpus / cpus
        how += f", scaled to this host's {cpus} CPUs"
    archs = len(profile.build.cuda_architectures) if profile.build.variant == "cuda" else 1
    if archs > 1:  # each CUDA architecture compiles every kernel again
        seconds *= archs
        how += f", × {archs} CUDA architectures"
    return seconds, how


def predicted_build(profile: Profile, observed: Observed) -> tuple[float, str]:
    """(seconds, how) of the image build this plan would run: the last full compile measured here for the
    profile's variant, else the default."""
    host = observed.host
    measured = observed.build_time
    if measured is not None:
        return measured, f"the last full compile of the {profile.build.variant} image here"
    return default_compile_s(profile, host.logical_cpus or host.physical_cores)


def build_cost(profile: Profile, observed: Observed) -> str:
    """The image step's cost: the predicted compile, and what a build from Docker's layer cache took here."""
    seconds, how = predicted_build(profile, observed)
    cost = f"compile llama.cpp: ~{duration(seconds)} ({how})"
    cached = observed.cached_build_time
    if cached is not None:
        # A build whose compile layer Docker still has (an image removed, its build cache kept) skips the compile.
        cost += f"; ~{duration(cached)} if Docker's layer cache still holds this compile (measured here)"
    return cost
