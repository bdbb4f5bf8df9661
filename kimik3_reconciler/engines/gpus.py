"""The GPUs a profile claims on a host, and who else holds them: what every engine's host findings start from (the
host gate, planning/host_gate.py, and an engine's own findings, engines/<name>/). Pure facts in, values out; no
engine's knowledge (a module of engines/ outside every engine package, as native_route.py is)."""

from __future__ import annotations

from kimik3_reconciler.model.facts import GpuFact, HostFacts
from kimik3_reconciler.model.profile import Profile

MIB = 1 << 20


def requested_gpus(profile: Profile, host: HostFacts) -> tuple[tuple[GpuFact, ...], list[str]]:
    """The GPUs the profile claims, resolved against the host (indices or UUIDs), and what is absent."""
    if profile.gpus == "all":
        return host.gpus, []
    if profile.gpus == "none":
        return (), []
    found, absent = [], []
    for ref in profile.gpus:
        gpu = next((g for g in host.gpus if (g.index == ref if isinstance(ref, int) else g.uuid == ref)), None)
        (found.append(gpu) if gpu else absent.append(str(ref)))
    return tuple(found), absent


def absent_refusal(absent: list[str], host: HostFacts) -> str:
    """The refusal of a profile's GPUs that are not this host's."""
    # rule: gpus-present
    # The profile's GPUs must be this host's (indices or UUIDs that NVML lists).
    have = ", ".join(f"{g.index} ({g.uuid})" for g in host.gpus)
    return f"gpus: {', '.join(absent)} not on this host (it has {have})"


def foreign_gpu_processes(profile: Profile, gpus: tuple[GpuFact, ...], stoppable: frozenset[int]) -> list[str]:
    """A refusal per process on the profile's GPUs that is neither ours nor one the plan stops first."""
    refusals = []
    if not profile.share_gpus:
        for gpu in gpus:
            for p in gpu.processes:
                if not p.ours and p.pid not in stoppable:
                    # rule: gpus-unclaimed
                    # Seed 000 step 1: check who else uses the GPUs before claiming any (commonly a shared pool).
                    refusals.append(
                        f"GPU {gpu.index} ({gpu.uuid}) holds {p.used_bytes // MIB} MiB for pid {p.pid}, "
                        "not this profile's container: another job on a shared GPU? pick other gpus, "
                        "stop it, or set share_gpus: true"
                    )
    return refusals


def claimed_gpus(profile: Profile, host: HostFacts) -> tuple[GpuFact, ...]:
    """The GPUs a route of `profile` runs on here: none with gpus: none or without the NVIDIA driver."""
    if profile.gpus == "none" or host.gpu_probe == "no-driver":
        return ()
    return requested_gpus(profile, host)[0]


def is_nvidia(gpu: GpuFact) -> bool:
    """A GPU kimik3's images can use: an NVML one (an observed host lists no other), or a described one that is
    NVIDIA's (a described host may name AMD's MI355X, which NVML never sees)."""
    return not gpu.uuid.startswith("described-") or "nvidia" in gpu.name.lower()
