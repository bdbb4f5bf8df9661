"""The host gate: refuse, with numbers, before any step runs (seed 000 step 1, "verify host").

Its costliest failures are host facts nobody checked: numa_balancing left on (a 20-minute stall),
another team's process on a shared GPU, a quant that cannot fit VRAM + RAM discovered after a
17-minute load. Pure: everything comes from the observed facts.
"""

from __future__ import annotations

from kimik3_reconciler.model.facts import GpuFact, HostFacts, Observed
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.planning.conflict_step import why_conflicting
from kimik3_reconciler.planning.model_step import disk_refusal
from kimik3_reconciler.planning.humanize import gib

MIN_DRIVER = 570  # seed 000: NVIDIA driver >= 570, open kernel module
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


def _stoppable_pids(profile: Profile, observed: Observed) -> frozenset[int]:
    """Our container's and those the conflict step stops first: their VRAM is about to be free."""
    pids = {observed.container.pid} if observed.container and observed.container.pid else set()
    pids |= {o.pid for o in observed.others
             if o.pid and o.up and why_conflicting(profile, o, profile.serve.port)}
    return frozenset(pids)


def _gpu_refusals(profile: Profile, host: HostFacts, stoppable: frozenset[int] = frozenset()) -> list[str]:
    if host.gpu_probe == "no-driver" or not host.gpus:
        return [f"0 GPUs on this host ({host.gpu_probe_detail or 'NVML sees none'}): build.variant cuda needs the "
                f"NVIDIA driver (>= {MIN_DRIVER}) and GPUs; use variant cpu with gpus: none for a CPU-only host"]
    refusals = []
    major = int((host.driver_version or "0").split(".")[0] or 0)
    if major < MIN_DRIVER:
        refusals.append(f"NVIDIA driver {host.driver_version} is older than {MIN_DRIVER}")
    gpus, absent = requested_gpus(profile, host)
    if absent:
        have = ", ".join(f"{g.index} ({g.uuid})" for g in host.gpus)
        refusals.append(f"gpus: {', '.join(absent)} not on this host (it has {have})")
    if not profile.share_gpus:
        for gpu in gpus:
            for p in gpu.processes:
                if not p.ours and p.pid not in stoppable:
                    refusals.append(f"GPU {gpu.index} ({gpu.uuid}) holds {p.used_bytes // MIB} MiB for pid {p.pid}, "
                                    "not this profile's container: another job on a shared GPU? pick other gpus, "
                                    "stop it, or set share_gpus: true")
    fit = profile.serve.fit_target
    if isinstance(fit, list) and profile.gpus == "all" and len(fit) != len(host.gpus):
        refusals.append(f"serve.fit_target lists {len(fit)} values but gpus: all is {len(host.gpus)} GPUs here")
    if host.docker_gpus is False:
        refusals.append("Docker cannot give containers GPUs: install nvidia-container-toolkit (CDI specs in /etc/cdi "
                        "or the nvidia runtime)")
    return refusals


def _stoppable_containers(profile: Profile, observed: Observed) -> frozenset[str]:
    """Ids of our container and of those the conflict step stops first: whatever listens inside them is ours."""
    ids = {observed.container.id} if observed.container else set()
    ids |= {o.id for o in observed.others if o.up and why_conflicting(profile, o, profile.serve.port)}
    return frozenset(ids)


def _port_refusal(profile: Profile, observed: Observed) -> str | None:
    """A foreign process on serve.port makes llama-server exit "couldn't bind" after the launch: refuse first."""
    stoppable = _stoppable_pids(profile, observed)
    containers = _stoppable_containers(profile, observed)
    # The owner's cgroup says which container it runs in: a child or wrapper of llama-server is ours too.
    foreign = [p for p in observed.host.listeners if p.pid not in stoppable and p.container_id not in containers]
    # An owner we cannot see (not root) may be our own container: only refuse when no kimik3 one is running.
    kimik3_running = bool(stoppable) or any(c.up for c in (observed.container, *observed.others) if c)
    named = [p for p in foreign if p.pid is not None or not kimik3_running]
    if not named:
        return None
    who = ", ".join(f"pid {p.pid} ({p.program})" if p.pid else "a process kimik3 cannot see (run as root)"
                    for p in named)
    return (f"port {profile.serve.port} is held by {who} listening on "
            f"{', '.join(sorted({p.address for p in named}))}, not a kimik3 container: llama-server could not bind "
            "it; stop that process or change serve.port")


def _memory_refusal(profile: Profile, observed: Observed) -> str | None:
    """Sizing is disk-and-memory: if the quant cannot fit VRAM + RAM, it cannot run at any split."""
    host, size = observed.host, observed.model.total_bytes
    if host.ram_total is None or not size:
        return None
    gpus, _ = requested_gpus(profile, host) if profile.build.variant == "cuda" else ((), [])
    vram = sum(g.memory_total for g in gpus)
    if size > vram + host.ram_total:
        return (f"the quant is {gib(size)} but VRAM + RAM is {gib(vram + host.ram_total)} ({len(gpus)} GPU(s) "
                f"{gib(vram)} + RAM {gib(host.ram_total)}): it cannot run at any split")
    return None


def host_gate(profile: Profile, observed: Observed) -> tuple[list[str], list[str]]:
    """(refusals, warnings). Facts that were not observed (pure tests) are not judged."""
    host = observed.host
    refusals, warnings = [], []
    # rule: numa-balancing
    if host.numa_balancing not in (None, 0):
        refusals.append(f"kernel.numa_balancing = {host.numa_balancing}: set it to 0 (sysctl kernel.numa_balancing=0); "
                        "seed 000 measured a 20+-minute single-request stall with it on")
    if profile.build.variant == "cuda" and host.gpu_probe is not None:
        refusals += _gpu_refusals(profile, host, _stoppable_pids(profile, observed))
    for refusal in (disk_refusal(observed.model), _memory_refusal(profile, observed), _port_refusal(profile, observed),
                    disk_refusal(observed.tokenizer) if observed.tokenizer else None):
        if refusal:
            refusals.append(refusal)
    features = profile.build.cpu_features
    # Only when the build would use AMX (auto-detect, or listed): `cpu_features: []` chose a portable build.
    if (host.cpu_flags and "amx_tile" not in host.cpu_flags and profile.quant_mode == "hybrid"
            and (features == "auto" or "amx" in features)):
        warnings.append("no AMX on this CPU: the CPU-resident experts use the AVX-512/AVX2 kernels (slower fallback)")
    return refusals, warnings
