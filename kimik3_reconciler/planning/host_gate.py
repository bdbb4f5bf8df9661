"""The host gate: refuse, with numbers, before any step runs (seed 000 step 1, "verify host").

Its costliest failures are host facts nobody checked: numa_balancing left on (a 20-minute stall),
another team's process on a shared GPU, a quant that cannot fit VRAM + RAM discovered after a
17-minute load, a driver too old for the image's CUDA, an image with no kernel for these GPUs, a
draft GPU without room. Pure: everything comes from the observed facts (engines/llamacpp/host_compat.py and
engines/llamacpp/memory_gate.py hold the tables and the arithmetic).
"""

from __future__ import annotations

import re

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.engines.base import EnginePlan, HostNeeds
from kimik3_reconciler.engines.llamacpp.build_flags import HOST_FLAGS, cpu_features
from kimik3_reconciler.engines.llamacpp.host_compat import (
    arch_name,
    best_coverage,
    driver_floor,
    image_cuda_version,
)
from kimik3_reconciler.engines.llamacpp.memory_gate import context_refusals, draft_room_refusals, memory_findings
from kimik3_reconciler.engines.llamacpp.vram_fit import derive_mode, margin_refusal, requested_gpus
from kimik3_reconciler.errors import FieldRefusal
from kimik3_reconciler.model.driver import driver_text, version
from kimik3_reconciler.model.facts import GpuFact, HostFacts, ModelFact, Observed
from kimik3_reconciler.model.profile import Profile, bind_addresses, upstream_port
from kimik3_reconciler.model.route import is_kind
from kimik3_reconciler.model.unit_files import runs_helper_unit
from kimik3_reconciler.planning.conflict_step import why_conflicting
from kimik3_reconciler.planning.model_step import disk_refusal
from kimik3_reconciler.planning.tensor_parallel import tensor_parallel_findings

MIB = 1 << 20
# Filesystem types that reach the bytes over a network (or a FUSE client of one): seed 001 wants NVMe.
NETWORK_FS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "ceph",
        "glusterfs",
        "lustre",
        "gpfs",
        "beegfs",
        "afs",
        "9p",
        "ncpfs",
        "davfs",
    }
)
NETWORK_FUSE = ("sshfs", "s3fs", "rclone", "gcsfuse", "goofys", "juicefs", "glusterfs", "ceph", "davfs2", "blobfuse")


def _stoppable_pids(profile: Profile, observed: Observed) -> frozenset[int]:
    """Our container's and those the conflict step stops first: their VRAM is about to be free. Our exporter's
    too: its latency proxy holds serve.port (metrics.proxy), and the plan replaces or stops it."""
    pids = {observed.container.pid} if observed.container and observed.container.pid else set()
    if observed.exporter is not None and observed.exporter.alive and observed.exporter.pid:
        pids.add(observed.exporter.pid)
    if observed.front is not None and observed.front.alive and observed.front.pid:
        pids.add(observed.front.pid)  # the front (metrics.handover) holds serve.port
    # Under `systemd:` the exporter and the front are units (planning/exporter_unit.py, front_unit.py): their
    # MainPIDs hold the same ports.
    pids |= {
        u.main_pid
        for u in (observed.systemd.units if observed.systemd else ())
        if u.main_pid and u.profile == profile.name and u.unit_file and runs_helper_unit(u.unit_file.body)
    }
    pids |= {o.pid for o in observed.others if o.pid and o.up and why_conflicting(profile, o, profile.serve.port)}
    return frozenset(pids)


def _runtime_cuda(profile: Profile, observed: Observed) -> tuple[int, int, int] | None:
    """The runtime base image's CUDA: its CUDA_VERSION env when pulled, else its tag."""
    env = {"CUDA_VERSION": observed.runtime_cuda} if observed.runtime_cuda else None
    return image_cuda_version(profile.build.base_images.runtime, env)


def _driver_refusal(profile: Profile, observed: Observed) -> str | None:
    """The driver must run the runtime base image's CUDA (seed 001: the CUDA 13 image needs R580+)."""
    host, runtime = observed.host, profile.build.base_images.runtime
    cuda = _runtime_cuda(profile, observed)
    floor, why = driver_floor(cuda)
    runs = f"; NVML: it runs CUDA <= {host.driver_cuda[0]}.{host.driver_cuda[1]}" if host.driver_cuda else ""
    # rule: driver-floor
    # Seed 001: R580+ for the CUDA 13 image; nvidia/cuda images refuse to start on an older driver
    # (their NVIDIA_REQUIRE_CUDA=cuda>=X.Y, checked by the container toolkit).
    if version(host.driver_version or "0") >= floor:
        # The driver's own word, where NVML gives it, counts too (a table row may be missing).
        if cuda and host.driver_cuda and host.driver_cuda < cuda[:2]:
            return (
                f"NVIDIA driver {host.driver_version} runs CUDA <= {host.driver_cuda[0]}.{host.driver_cuda[1]} "
                f"(NVML), older than CUDA {'.'.join(map(str, cuda))} of the runtime base image {runtime}: upgrade "
                "the driver, or set build.base_images to a CUDA the driver runs"
            )
        return None
    return (
        f"NVIDIA driver {host.driver_version} is older than {driver_text(floor)}, the minimum for the runtime "
        f"base image {runtime} ({why}{runs}): upgrade the driver, or set build.base_images to a CUDA the "
        "driver runs"
    )


def _arch_findings(profile: Profile, host: HostFacts) -> tuple[list[str], list[str]]:
    """Every requested GPU needs kernels among build.cuda_architectures: found before the build, not after the load."""
    archs = profile.build.cuda_architectures
    gpus, _ = requested_gpus(profile, host)
    groups: dict[tuple[tuple[int, int], str], list[int]] = {}
    for gpu in gpus:
        groups.setdefault((gpu.compute_capability, gpu.name), []).append(gpu.index)
    rewritten = any(re.fullmatch(r"12\d(-real|-virtual)?", a) for a in archs)
    refusals, warnings = [], []
    for (cc, name), indices in groups.items():
        which = f"GPU {indices[0]}" if len(indices) == 1 else f"GPUs {', '.join(map(str, indices))}"
        named = (
            f"{which} ({name}) {'has' if len(indices) == 1 else 'have'} compute capability {cc[0]}.{cc[1]} "
            f"(sm_{arch_name(cc)})"
        )
        coverage = best_coverage(archs, cc)
        # rule: cuda-arch-covers-gpus
        # llama.cpp CMake (reference/llama-cpp.md §3.2): a plain 12X builds 12Xa, which runs on that GPU only.
        if coverage is None:
            why = " (llama.cpp builds a plain 12X as 12Xa, for that GPU only)" if rewritten else ""
            refusals.append(
                f'{named} but build.cuda_architectures {archs} has no kernel it can run{why}: add "{arch_name(cc)}"'
            )
        elif coverage == "ptx":
            warnings.append(
                f"{named}: build.cuda_architectures {archs} gives it only PTX, compiled at every cold "
                f'start and slower than native kernels: add "{arch_name(cc)}"'
            )
    return refusals, warnings


def _gpu_refusals(profile: Profile, observed: Observed, stoppable: frozenset[int] = frozenset()) -> list[str]:
    host = observed.host
    # rule: gpus-present
    # Seed 000 step 1: nvidia-smi first (GPU count/VRAM): a CUDA profile on a host without them cannot load.
    if host.gpu_probe == "no-driver" or not host.gpus:
        floor, _ = driver_floor(_runtime_cuda(profile, observed))
        return [
            f"0 GPUs on this host ({host.gpu_probe_detail or 'NVML sees none'}): build.variant cuda needs the "
            f"NVIDIA driver (>= {driver_text(floor)}) and GPUs; use variant cpu with gpus: none for a CPU-only "
            "host"
        ]
    refusals = [r for r in (_driver_refusal(profile, observed),) if r]
    gpus, absent = requested_gpus(profile, host)
    if absent:
        # rule: gpus-present
        # The profile's GPUs must be this host's (indices or UUIDs that NVML lists).
        have = ", ".join(f"{g.index} ({g.uuid})" for g in host.gpus)
        refusals.append(f"gpus: {', '.join(absent)} not on this host (it has {have})")
    twice = sorted({g.index for g in gpus if sum(h.index == g.index for h in gpus) > 1})
    if twice:
        # rule: gpus-present
        # An index and a UUID can name one GPU: it would be requested once and counted twice (fit_target, split).
        refusals.append(
            f"gpus: names GPU {', '.join(map(str, twice))} twice (by index and by UUID): list each GPU once"
        )
    refusals.extend(_foreign_gpu_processes(profile, gpus, stoppable))
    fit = profile.serve.fit_target
    if isinstance(fit, list) and profile.gpus == "all" and len(fit) != len(host.gpus):
        # rule: fit-target-list
        # llama.cpp indexes --fit-target like the devices: with gpus: all only the host's count says how many.
        refusals.append(
            FieldRefusal(
                ("serve", "fit_target"),
                f"serve.fit_target lists {len(fit)} values but gpus: all is {len(host.gpus)} GPUs here",
            )
        )
    if host.docker_gpus is False:
        # rule: gpu-plumbing-probe
        # No CDI spec and no nvidia runtime: no container can get a GPU, so the probe has nothing to try.
        refusals.append(
            "Docker cannot give containers GPUs: install nvidia-container-toolkit (CDI specs in /etc/cdi "
            "or the nvidia runtime)"
        )
    return refusals


def _stoppable_containers(profile: Profile, observed: Observed) -> frozenset[str]:
    """Ids of our container and of those the conflict step stops first: whatever listens inside them is ours."""
    ids = {observed.container.id} if observed.container else set()
    ids |= {o.id for o in observed.others if o.up and why_conflicting(profile, o, profile.serve.port)}
    return frozenset(ids)


def _port_binders(profile: Profile) -> dict[int, tuple[str, str]]:
    """{port: (what binds it, the field that moves it)} for every port the profile's processes listen on."""
    server = engine_for(profile.engine).server  # a vLLM profile's port is vllm serve's, not llama-server's
    binders = {profile.serve.port: (server, "serve.port")}
    if profile.metrics is not None:
        inner = upstream_port(profile)
        if inner is not None:
            binders[profile.serve.port] = (
                "the latency proxy" if profile.metrics.handover is None else "kimik3's front (metrics.handover)",
                "serve.port",
            )
            binders.setdefault(inner, (f"{server} (behind the proxy)", "metrics.server_port"))
        binders.setdefault(profile.metrics.port, ("the metrics exporter", "metrics.port"))
    return binders


def _exporter_sockets(observed: Observed) -> frozenset[tuple[str, int]]:
    """(address, port) our exporter answers on: its /healthz gave this profile's exporter fingerprint there, so
    whoever listens at that address and port is it (its pid may be unknown: a unit's MainPID in another pid
    namespace, or not readable)."""
    running = observed.exporter
    sockets: set[tuple[str, int]] = set()
    if running is not None and running.serving is not None and running.config:
        config = running.config
        sockets.add((str(config.get("bind")), int(config.get("port") or 0)))
        if config.get("proxy_port"):
            sockets.add((str(config.get("proxy_bind")), int(config["proxy_port"])))
    front = observed.front
    if front is not None and front.serving is not None and front.config:
        # The front (metrics.handover): its control /healthz answered our fingerprint at that address and port.
        sockets.add((str(front.config.get("bind")), int(front.config.get("port") or 0)))
    return frozenset(sockets)


def _address_refusals(profile: Profile, observed: Observed) -> list[str]:
    refusals: list[str] = []
    for field, address in bind_addresses(profile):
        if address in observed.host.absent_addresses:
            # rule: bind-address-local
            # PROFILE.md: serve.host is loopback, tailscale or an IP *on this host*; another one passed the plan and
            # failed the launch ("couldn't bind"), after the build and, on a real quant, the download.
            refusals.append(
                FieldRefusal(
                    field,
                    f"{'.'.join(field)}: {address} is not an address of this host "
                    "(nothing here can bind it): use loopback, tailscale or one of its own",
                )
            )
    return refusals


def _port_refusals(profile: Profile, observed: Observed) -> list[str]:
    """A foreign process on serve.port makes the engine's server exit "couldn't bind" after the launch; on
    metrics.port or the server's inner port (metrics.proxy) the exporter or the server behind the proxy fails the
    same way."""
    stoppable = _stoppable_pids(profile, observed)
    containers = _stoppable_containers(profile, observed)
    # An owner we cannot see (not root) may be our own container: only refuse when no kimik3 one is running.
    kimik3_running = bool(stoppable) or any(c.up for c in (observed.container, *observed.others) if c)
    exporter = _exporter_sockets(observed)
    refusals = []
    for port, (binder, field) in _port_binders(profile).items():
        # The owner's cgroup says which container it runs in: a child or wrapper of llama-server is ours too.
        foreign = [
            p
            for p in observed.host.listeners
            if p.port == port
            and p.pid not in stoppable
            and p.container_id not in containers
            and (p.address, p.port) not in exporter
        ]
        named = [p for p in foreign if p.pid is not None or not kimik3_running]
        if not named:
            continue
        # rule: port-free
        # A port held by another process is found after the launch (and, on a real quant, a ~17-minute load) otherwise.
        who = ", ".join(
            f"pid {p.pid} ({p.program})" if p.pid else "a process kimik3 cannot see (run as root)" for p in named
        )
        refusals.append(
            f"port {port} is held by {who} listening on {', '.join(sorted({p.address for p in named}))}, "
            f"not a kimik3 container: {binder} could not bind it; stop that process or change {field}"
        )
    return refusals


def _cache_filesystem_warning(model: ModelFact) -> str | None:
    """Seed 001: NVMe, not network mounts; a cold load reads the whole quant (seed 000: ~17 min for 802 GB)."""
    fs = model.cache_fs
    if fs is None:
        return None
    kind = fs.fstype.removeprefix("fuse.")
    # rule: cache-dir-local
    # Seed 001: prefer NVMe to network-mounted, slow disks; the model cache's topology becomes part of inference.
    fuse_client = fs.fstype.startswith("fuse.") and kind in NETWORK_FUSE
    if fs.fstype in NETWORK_FS or fs.fstype.startswith("nfs") or fuse_client:
        where = f"model.local_path {model.local_path}" if model.local_path else f"model.cache_dir {model.cache_dir}"
        return (
            f"{where} is on a network filesystem ({fs.fstype}, {fs.source} mounted at "
            f"{fs.mountpoint}): seed 001 wants local NVMe; every cold load reads the whole quant over it "
            "(seed 000: ~17 min for 802 GB from local disk)"
        )
    return None


def _cpu_findings(profile: Profile, observed: Observed, mode: str) -> tuple[list[str], list[str]]:
    """AVX-512 is what the CPU experts use; AMX is irrelevant to them (seed 000), so it is not judged."""
    host = observed.host
    if not host.cpu_flags:
        return [], []  # not observed
    flags, built = set(host.cpu_flags), cpu_features(profile, host)
    missing = [f for f in built if f != "amx" and not set(HOST_FLAGS[f]) <= flags]
    # rule: cpu-features-on-host
    # Listed AVX-512 kernels are compiled into the whole CPU backend: an illegal instruction on this CPU.
    if missing:
        lacks = ", ".join(HOST_FLAGS[m][0] for m in missing)
        return [
            f"build.cpu_features lists {', '.join(missing)} but this CPU lacks {lacks}: "
            "the image's CPU kernels would stop on an illegal instruction here; use cpu_features: auto"
        ], []
    experts_on_cpu = profile.build.variant == "cpu" or mode == "hybrid"
    # rule: avx512-experts
    # Seed 000: the hybrid's CPU experts run on AVX-512; AMX "turns out to be irrelevant to the experts".
    # An explicit list is the profile's choice (`[]`: a portable image): only `auto` on a CPU without AVX-512 warns.
    if experts_on_cpu and profile.build.cpu_features == "auto" and "avx512f" not in flags:
        return [], [
            "no AVX-512 on this CPU: the hybrid's CPU-resident experts run on AVX2 kernels, slower than the "
            "AVX-512 ones seed 000 measured (AMX does not matter for them)"
        ]
    return [], []


def _module_findings(profile: Profile, host: HostFacts) -> tuple[list[str], list[str]]:
    """The NVIDIA kernel module: seed 000's host needs the open one (Blackwell GPUs run only on it)."""
    if profile.gpus == "none" or host.nvidia_module != "proprietary":
        return [], []  # the open module, no driver loaded, or not observed: nothing to say
    blackwell = [g for g in requested_gpus(profile, host)[0] if g.compute_capability[0] >= 10]
    # rule: nvidia-open-module
    # Seed 000: "Needs the NVIDIA driver (>=570, open kernel module)"; NVIDIA supports Blackwell (sm_100, sm_120)
    # only on its open GPU kernel modules. kimik3 cannot switch modules: it says which package to install.
    if blackwell:
        return [
            f"GPU {blackwell[0].index} ({blackwell[0].name}) runs under the proprietary NVIDIA kernel module; "
            "seed 000 requires the open one (Blackwell GPUs need it): install the driver's open kernel modules "
            "(e.g. nvidia-driver-580-open, or the .run installer's -m=kernel-open) and reboot"
        ], []
    return [], [
        "the NVIDIA kernel module is the proprietary one; seed 000's host runs the open one (required for its "
        "Blackwell GPUs; these GPUs also run on the proprietary one)"
    ]


GIB = 1 << 30
# Below this share of the engine's memory left after the weights, the KV cache holds few requests: warned.
KV_ROOM_WARN = 0.10


def _foreign_gpu_processes(profile: Profile, gpus: tuple[GpuFact, ...], stoppable: frozenset[int]) -> list[str]:
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


def checkpoint_findings(
    profile: Profile, observed: Observed, needs: HostNeeds, stoppable: frozenset[int] = frozenset()
) -> tuple[list[str], list[str]]:
    """(refusals, warnings) for an engine that serves the whole checkpoint from VRAM (vllm): its driver floor,
    GPU count and kinds (engine.host_needs: the numbers and their source), and the checkpoint's weights against
    the engine's share of the GPUs' memory. Not judged with gpus: none (the CPU build) or GPUs not observed."""
    host = observed.host
    if profile.gpus == "none" or host.gpu_probe is None:
        return [], []
    floor = driver_text(needs.min_driver)
    if host.gpu_probe == "no-driver" or not host.gpus:
        # rule: engine-host-needs
        # The recipe's image needs the driver and the GPUs; refused before a multi-terabyte download.
        return [
            f"0 GPUs on this host ({host.gpu_probe_detail or 'NVML sees none'}): engine {profile.engine} needs "
            f"{needs.gpus} GPUs and the NVIDIA driver >= {floor} ({needs.source}); use gpus: none only with a "
            "CPU build of the engine"
        ], []
    refusals: list[str] = []
    if version(host.driver_version or "0") < needs.min_driver:
        # rule: engine-host-needs
        # Seed 001: the CUDA 13 image needs R580+; the container would not start on an older driver.
        refusals.append(
            f"NVIDIA driver {host.driver_version} is older than {floor}, the minimum of engine "
            f"{profile.engine}'s image ({needs.source}): upgrade the driver"
        )
    gpus, absent = requested_gpus(profile, host)
    if absent:
        # rule: gpus-present
        # The profile's GPUs must be this host's (indices or UUIDs that NVML lists).
        have = ", ".join(f"{g.index} ({g.uuid})" for g in host.gpus)
        refusals.append(f"gpus: {', '.join(absent)} not on this host (it has {have})")
    if len(gpus) < needs.gpus:
        # rule: engine-host-needs
        # One tensor-parallel rank per GPU: fewer GPUs than ranks never start.
        refusals.append(
            FieldRefusal(
                tuple(needs.gpus_field.split(".")),
                f"engine {profile.engine} runs "
                f"{needs.gpus} tensor-parallel ranks, one per GPU, but the profile gets "
                f"{len(gpus)} GPU(s) here ({needs.source})",
            )
        )
    others = [g for g in gpus if needs.gpu_kinds and not is_kind(g.name, needs.gpu_kinds)]
    if others:
        # rule: engine-host-needs
        # The recipe was written and measured for these GPUs; elsewhere it is the operator's explicit choice.
        names = ", ".join(sorted({g.name for g in others}))
        indices = ", ".join(str(g.index) for g in others)
        refusals.append(
            FieldRefusal(
                tuple(needs.kinds_override.split(".")),
                f"GPUs {indices} are {names}, not "
                f"{' or '.join(needs.gpu_kinds)} ({needs.source}): set {needs.kinds_override}: "
                "true to run the recipe on them anyway",
            )
        )
    refusals += _foreign_gpu_processes(profile, gpus, stoppable)
    if host.docker_gpus is False:
        # rule: gpu-plumbing-probe
        # No CDI spec and no nvidia runtime: no container can get a GPU.
        refusals.append(
            "Docker cannot give containers GPUs: install nvidia-container-toolkit (CDI specs in /etc/cdi "
            "or the nvidia runtime)"
        )
    weights = sum(f.size for f in observed.model.files if f.path.endswith(".safetensors"))
    used = gpus[: needs.gpus] if len(gpus) >= needs.gpus else gpus
    share = int(sum(g.memory_total for g in used) * needs.memory_share)
    warnings: list[str] = []
    if weights and used:
        where = (
            f"{share / GIB:.0f} GiB: {needs.memory_share:g} of the {sum(g.memory_total for g in used) / GIB:.0f} "
            f"GiB of VRAM on {len(used)} GPU(s)"
        )
        if weights > share:
            # rule: engine-host-needs
            # The engine holds every weight in its share of VRAM (the checkpoint's safetensors, as the Hub lists them).
            refusals.append(
                f"the checkpoint's weights ({weights / GIB:.0f} GiB of safetensors at "
                f"{profile.model.revision[:12]}) do not fit engine {profile.engine}'s memory ({where})"
            )
        elif share - weights < KV_ROOM_WARN * share:
            warnings.append(
                f"the checkpoint's weights ({weights / GIB:.0f} GiB) leave {(share - weights) / GIB:.0f} "
                f"GiB of engine {profile.engine}'s memory ({where}) for the KV cache: few requests fit"
            )
    return refusals, warnings


def host_gate(profile: Profile, observed: Observed, rendered: EnginePlan | None = None) -> tuple[list[str], list[str]]:
    """(refusals, warnings). Facts that were not observed (pure tests) are not judged. `rendered`: the engine's plan
    for this profile and observation where the caller has it (`plan`), else llama.cpp's mode is derived here."""
    host = observed.host
    refusals, warnings = [], []
    needs = engine_for(profile.engine).host_needs(profile)
    if needs is not None:  # an engine with the whole checkpoint in VRAM: its needs, then what every deployment needs
        if needs.hosts > 1:
            # rule: cluster-not-converged
            # The head's server waits for members nobody started: found after the image pull and the download.
            return [
                f"{needs.hosts_field}: this replica spans {needs.hosts} hosts; kimik3 validates it and renders each "
                "host's commands (engines' cluster_launch), but does not start the other hosts' members yet: "
                "see docs/operations.md 'A replica over several hosts', or leave the cluster out"
            ], []
        refusals, warnings = checkpoint_findings(profile, observed, needs, _stoppable_pids(profile, observed))
        split_refusals, split_warnings = tensor_parallel_findings(profile, observed, needs)  # heads, idle GPUs
        refusals, warnings = refusals + split_refusals, warnings + split_warnings
        module_refusals, module_warnings = _module_findings(profile, host)  # Blackwell needs the open module
        refusals, warnings = refusals + module_refusals, warnings + module_warnings
        refusals += [r for r in (disk_refusal(observed.model),) if r]
        refusals += _port_refusals(profile, observed) + _address_refusals(profile, observed)
        warnings += [w for w in (_cache_filesystem_warning(observed.model),) if w]
        return refusals, warnings
    # rule: numa-balancing
    # With host.prepare the plan's first step sets it (planning/host_step.py) before anything runs under it.
    if host.numa_balancing not in (None, 0) and not profile.host.prepare:
        refusals.append(
            f"kernel.numa_balancing = {host.numa_balancing}: set it to 0 (sysctl kernel.numa_balancing=0), "
            "or let kimik3 set and persist it (host: {prepare: true}); "
            "seed 000 measured a 20+-minute single-request stall with it on"
        )
    stoppable = _stoppable_pids(profile, observed)
    module_refusals, module_warnings = _module_findings(profile, host)
    refusals, warnings = refusals + module_refusals, warnings + module_warnings
    if profile.build.variant == "cuda" and host.gpu_probe is not None:
        refusals += _gpu_refusals(profile, observed, stoppable)
        if host.gpu_probe == "ok":
            found, cautions = _arch_findings(profile, host)
            refusals, warnings = refusals + found, warnings + cautions
    ours_running = bool(stoppable) or bool(observed.container and observed.container.loaded)  # its memory frees
    memory, caution = memory_findings(profile, observed, ours_running)
    refusals += memory + draft_room_refusals(profile, observed) + context_refusals(profile, observed)
    warnings += caution
    for refusal in (disk_refusal(observed.model), disk_refusal(observed.tokenizer) if observed.tokenizer else None):
        if refusal:
            refusals.append(refusal)
    refusals += _port_refusals(profile, observed) + _address_refusals(profile, observed)
    decision = rendered.mode if rendered is not None and rendered.mode is not None else derive_mode(profile, observed)
    refusals += [r for r in (margin_refusal(profile, decision),) if r]
    cpu_refusals, cpu_warnings = _cpu_findings(profile, observed, decision.mode)
    refusals, warnings = refusals + cpu_refusals, warnings + cpu_warnings
    warnings += [w for w in (_cache_filesystem_warning(observed.model),) if w]
    return refusals, warnings
