"""The host gate: refuse, with numbers, before any step runs (seed 000 step 1, "verify host").

Its costliest failures are host facts nobody checked: numa_balancing left on (a 20-minute stall),
another team's process on a shared GPU, a quant that cannot fit VRAM + RAM discovered after a
17-minute load, a driver too old for the image's CUDA, an image with no kernel for these GPUs, a
draft GPU without room. Pure: everything comes from the observed facts (engines/llamacpp/host_compat.py and
engines/llamacpp/memory_gate.py hold the tables and the arithmetic).
"""

from __future__ import annotations

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.engines.base import EnginePlan, HostNeeds
from kimik3_reconciler.engines.gpus import absent_refusal, foreign_gpu_processes, requested_gpus
from kimik3_reconciler.errors import FieldRefusal
from kimik3_reconciler.model.driver import driver_text, version
from kimik3_reconciler.model.facts import HostFacts, ModelFact, Observed
from kimik3_reconciler.model.profile import Profile, bind_addresses, upstream_port
from kimik3_reconciler.model.route import is_kind
from kimik3_reconciler.model.unit_files import runs_helper_unit
from kimik3_reconciler.planning.conflict_step import why_conflicting
from kimik3_reconciler.planning.model_step import disk_refusal
from kimik3_reconciler.planning.tensor_parallel import tensor_parallel_findings

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
        refusals.append(absent_refusal(absent, host))
    # A replica over several hosts puts its share of the ranks here (tensor x pipeline over the hosts: the rule
    # cluster-ranks refuses a remainder), and its share of the weights.
    here = needs.gpus * needs.pipeline // needs.hosts if needs.hosts > 1 else needs.gpus
    share_of = f" (this host's share of {needs.hosts} hosts)" if needs.hosts > 1 else ""
    if len(gpus) < here:
        # rule: engine-host-needs
        # One tensor-parallel rank per GPU: fewer GPUs than ranks never start.
        refusals.append(
            FieldRefusal(
                tuple(needs.gpus_field.split(".")),
                f"engine {profile.engine} runs "
                f"{here} tensor-parallel ranks{share_of}, one per GPU, but the profile gets "
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
    refusals += foreign_gpu_processes(profile, gpus, stoppable)
    if host.docker_gpus is False:
        # rule: gpu-plumbing-probe
        # Neither CDI nor `--gpus` (runtime or hook; model/gpu_request.py): no container can get a GPU.
        refusals.append(
            "Docker cannot give containers GPUs: install nvidia-container-toolkit (CDI specs in /etc/cdi, "
            "the nvidia runtime, or its nvidia-container-runtime-hook on dockerd's PATH)"
        )
    weights = sum(f.size for f in observed.model.files if f.path.endswith(".safetensors")) // needs.hosts
    used = gpus[:here] if len(gpus) >= here else gpus
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
                f"the checkpoint's weights{share_of} ({weights / GIB:.0f} GiB of safetensors at "
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
    for this profile and observation where the caller has it (`plan`, the routes), else rendered here; the engine's
    own findings read its sizing from it, never derive it again."""
    host = observed.host
    engine = engine_for(profile.engine)
    needs = engine.host_needs(profile)
    if needs is not None:  # an engine with the whole checkpoint in VRAM: its needs, then what every deployment needs
        refusals, warnings = checkpoint_findings(profile, observed, needs, _stoppable_pids(profile, observed))
        split_refusals, split_warnings = tensor_parallel_findings(profile, observed, needs)  # heads, idle GPUs
        refusals, warnings = refusals + split_refusals, warnings + split_warnings
        module_refusals, module_warnings = _module_findings(profile, host)  # Blackwell needs the open module
        refusals, warnings = refusals + module_refusals, warnings + module_warnings
        refusals += [r for r in (disk_refusal(observed.model),) if r]
        refusals += _port_refusals(profile, observed) + _address_refusals(profile, observed)
        warnings += [w for w in (_cache_filesystem_warning(observed.model),) if w]
        return refusals, warnings
    refusals, warnings = [], []
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
    ours_running = bool(stoppable) or bool(observed.container and observed.container.loaded)  # its memory frees
    # The engine's own findings on its devices, its build and its sizing (the GPUs, the image's kernels and CUDA,
    # VRAM + RAM, the context), judged from its plan.
    rendered = rendered if rendered is not None else engine.render_plan(profile, observed)
    found, cautions = engine.host_findings(profile, observed, rendered, stoppable, ours_running)
    refusals, warnings = refusals + found, warnings + cautions
    for refusal in (disk_refusal(observed.model), disk_refusal(observed.tokenizer) if observed.tokenizer else None):
        if refusal:
            refusals.append(refusal)
    refusals += _port_refusals(profile, observed) + _address_refusals(profile, observed)
    warnings += [w for w in (_cache_filesystem_warning(observed.model),) if w]
    return refusals, warnings
