"""Observed state: what the collectors saw on the host, as frozen values the planner reads (model/frozen.py:
kimik3's collectors make them, so they need values, not pydantic's validation)."""

from __future__ import annotations

import hashlib
import json
from pathlib import PurePosixPath
from typing import Any, Literal

from kimik3_reconciler.model.frozen import Frozen, default


class _Fact(Frozen):
    """Frozen, unknown fields refused, lists given for tuple fields and mappings for nested facts converted."""


class GpuProcess(_Fact):
    """A process holding memory on a GPU (NVML reports host pids)."""

    pid: int
    used_bytes: int
    ours: bool = False  # the profile's own container


class GpuFact(_Fact):
    index: int
    uuid: str
    name: str
    compute_capability: tuple[int, int]
    memory_total: int
    memory_free: int
    processes: tuple[GpuProcess, ...] = ()


class PortListener(_Fact):
    """A TCP socket listening on the profile's port (from /proc/net/tcp{,6}), and the process holding it."""

    address: str
    port: int
    pid: int | None = None  # None: the owner could not be read (another user's process, not root)
    program: str | None = None
    container_id: str | None = None  # the Docker container whose cgroup the owner is in (None: not in one)


class HostFacts(_Fact):
    """What the gate and the launch spec need to know about this host (observed every plan)."""

    physical_cores: int = 1
    logical_cpus: int | None = None  # hardware threads (`nproc`: the image compile's -j); None: not observed
    sockets: int = 1
    numa_nodes: int = 1
    cpu_flags: tuple[str, ...] = ()
    tailscale_ipv4: str | None = None
    absent_addresses: tuple[str, ...] = ()  # IP literals the profile binds (serve.host, metrics.bind) this host lacks
    # None: not observed (pure tests); "no-driver": no NVIDIA driver/NVML, i.e. 0 GPUs, a fact.
    gpu_probe: Literal["ok", "no-driver"] | None = None
    gpu_probe_detail: str | None = None
    driver_version: str | None = None
    driver_cuda: tuple[int, int] | None = None  # the newest CUDA the driver runs (NVML), e.g. (13, 0)
    gpus: tuple[GpuFact, ...] = ()
    ram_total: int | None = None
    ram_available: int | None = None
    numa_balancing: int | None = None  # kernel.numa_balancing; None where the kernel has no such knob
    # The NVIDIA kernel module (/proc/driver/nvidia/version): "open" (NVIDIA's open GPU kernel modules, which seed
    # 000 requires and Blackwell needs), "proprietary"; None: no driver loaded, or not observed (pure tests).
    nvidia_module: Literal["open", "proprietary"] | None = None
    docker_gpus: bool | None = None  # can containers get GPUs either way? (observe/docker_objects.docker_gives_gpus)
    listeners: tuple[PortListener, ...] = ()  # sockets listening on serve.port (ours included; the gate sorts)


class DockerGpus(_Fact):
    """How a Docker shows it gives containers GPUs: what its API says (`docker info`), and on the head's host what
    its files say too (the toolkit's hook). A cluster node's is its API alone, its files out of kimik3's reach.
    model/gpu_request.py decides from it which way containers ask, the same for the head and for a node."""

    # The nvidia runtime is registered (Runtimes). `--gpus` does not go through it (moby's nvidia device driver
    # injects the hook under runc); it is read as the toolkit, hook included, installed before dockerd's last start
    # (`nvidia-ctk runtime configure` asks for that restart): all a node's API shows of `--gpus`.
    runtime: bool = False
    # The toolkit's nvidia-container-runtime-hook is on dockerd's PATH: dockerd then gives `--gpus` through it with
    # no runtime registered (moby's nvidia device driver). None: unseen (a node's host, out of reach).
    hook: bool | None = None
    reads_cdi: bool = False  # the daemon reads CDI specs (CDISpecDirs not empty; before Engine 25 never)
    # The CDI devices of kind nvidia.com/gpu it found (DiscoveredDevices, e.g. nvidia.com/gpu=0 and =all; Docker
    # 28.2+ leaves the field out when it found none: ()); None: a daemon that does not list what it found (before
    # 28.2: then only its reading CDI, and on the head a spec of the kind, is known); () on the head also: no spec
    # of the kind in /etc/cdi or /var/run/cdi.
    cdi_devices: tuple[str, ...] | None = None

    @property
    def runtime_gpus(self) -> bool:
        """`--gpus` can work: the nvidia runtime registered or the toolkit's hook on dockerd's PATH."""
        return self.runtime or self.hook is True


class GpuPlumbing(DockerGpus):
    """How Docker can give containers GPUs on the head's host (seed 000 step 1: "GPU containers work via CDI"):
    what a node's Docker shows, plus the toolkit's hook, version and CDI spec files read from the host's files."""

    hook: bool | None = False  # seen on the head's own disk (HostPort.runtime_hook)
    toolkit_version: str | None = None  # nvidia-container-toolkit (nvidia-ctk / nvidia-container-cli --version)
    cdi_specs: tuple[str, ...] = ()  # the CDI spec files that declare nvidia.com/gpu


class CheckpointConfig(_Fact):
    """What the plan reads of a checkpoint's config.json at the pinned revision (model/checkpoint_config.py parses
    it): the attention heads tensor parallelism splits over its ranks, and the key they were read from."""

    attention_heads: int
    heads_key: str  # "num_attention_heads", or "text_config.num_attention_heads" for a multimodal checkpoint


class ModelLayout(_Fact):
    """What the placement forecast needs from a quant's GGUF headers (summed over all shards)."""

    n_layer: int
    layer_dense: tuple[int, ...]  # bytes per layer that always go to the layer's GPU
    layer_experts: tuple[int, ...]  # routed-expert bytes per layer (may stay on the CPU)
    output_bytes: int  # output head: on the last GPU of the split
    token_embd_bytes: int  # the input embedding stays in host memory
    kv_bytes_per_token: int  # f16 MLA K cache over all MLA layers, per context cell
    # <arch>.context_length: the trained context, each slot's cap (0: the header has none). No default, so a
    # layout record written before it was read counts as absent and the headers are read again.
    context_length: int
    # F32 recurrent state of the KDA layers per sequence (slot): conv 3*(d_conv-1)*di + state hd*hd*n_head floats a
    # layer (reference/llama-cpp.md §4.5); llama.cpp keeps one per slot beside the KV cache.
    state_bytes_per_slot: int
    n_embd: int = 0
    n_vocab: int = 0


class RemoteFile(_Fact):
    """One file of the pinned revision: its path in the repo, size and LFS sha256."""

    path: str
    size: int
    sha256: str | None = None  # LFS files: the hub's sha256
    git_oid: str | None = None  # plain git files (json, small text): the git blob sha1

    @property
    def blob_name(self) -> str | None:
        """Its blob's name in the HF cache (`blobs/<name>`): HF names LFS blobs by sha256, plain git files by sha1."""
        return self.sha256 or self.git_oid


class FileStat(_Fact):
    """A cached file's stat fingerprint, recorded when its bytes were verified: any edit through the
    filesystem moves at least one field (ctime too, even when the edit restores mtime)."""

    path: str
    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int


class FilesystemFact(_Fact):
    """The mount holding a path (/proc/self/mounts, longest matching mount point of its real path)."""

    path: str  # the real path looked up (symlinks resolved)
    mountpoint: str
    fstype: str  # ext4, xfs, nfs4, cifs, fuse.sshfs, ...
    source: str  # the device or the server:/export


def manifest_digest(files: tuple[RemoteFile, ...], quant: str) -> str:
    """sha256 over each file's name (below the quant folder), size and sha256, sorted: one value for the content."""
    rows = sorted([f.path.removeprefix(quant + "/"), f.size, f.sha256] for f in files)
    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()


class ModelFact(_Fact):
    """Which files of repo@revision the deployment needs, and which are complete in the cache.

    `missing` is what the download step fetches: absent, cut short, or `corrupt` (present, but
    re-hashed to another sha256 than the one verified: after a stat change, or every file with
    `--verify`). `stats` are the stat fingerprints of the files verified now; `unrecorded` names those
    whose fingerprint differs from (or is absent in) the manifest, so the step records them. `in_blobs` names
    the missing files whose blob is in the cache at the listed size (a removed snapshot link, or a file another
    tool fetched): the download re-hashes and links it, fetching it only if the hash differs.
    """

    repo: str
    revision: str
    quant: str
    cache_dir: str
    files: tuple[RemoteFile, ...] = ()
    missing: tuple[str, ...] = ()
    corrupt: tuple[str, ...] = ()  # sha256 mismatch on re-hash (also in `missing`)
    changed: tuple[str, ...] = ()  # stat moved since verified, so re-hashed (corrupt or not)
    stats: tuple[FileStat, ...] = ()
    unrecorded: tuple[str, ...] = ()
    in_blobs: tuple[str, ...] = ()  # missing, but its blob is cached (also in `missing`; never `corrupt`)
    listing: Literal["manifest", "hub"] = "manifest"
    listing_error: str | None = None  # the hub could not list the files (the gate speaks first)
    cache_free_bytes: int | None = None  # free space on the cache's filesystem
    cache_fs: FilesystemFact | None = None  # the mount the cache lives on (None: not looked at)
    # `model.local_path` (resolved): a GGUF file or a folder of shards on this host, served from there. Its files
    # are listed as `<quant>/<name>` (as a hub quant's are, so the shard the server opens, the layout and the
    # sizes read them alike); `cache_dir` is the folder holding them. None: the hub's quant in the HF cache.
    local_path: str | None = None
    recorded_digest: str | None = None  # local: the digest of the manifest kimik3 recorded (None: never verified)

    @property
    def complete(self) -> bool:
        return bool(self.files) and not self.missing

    @property
    def digest(self) -> str:
        """The sha256 of the files' names, sizes and sha256 (a local model's content: what its container's
        fingerprint carries, so a changed file relaunches the server)."""
        return manifest_digest(self.files, self.quant)

    @property
    def drifted(self) -> bool:
        """A local model whose content differs from the manifest kimik3 recorded (a new file was written there)."""
        return self.recorded_digest is not None and self.recorded_digest != self.digest

    def host_path(self, path: str) -> str:
        """Where the file `path` (as listed: `<quant>/<name>` or a top-level file) is on this host: the snapshot
        link in the HF cache, or under the local folder."""
        if self.local_path is not None:
            return str(PurePosixPath(self.cache_dir) / path.removeprefix(self.quant + "/"))
        repo = "models--" + self.repo.replace("/", "--")  # the HF cache's folder of one repo (planning/launch.repo_dir)
        return str(PurePosixPath(self.cache_dir) / repo / "snapshots" / self.revision / path)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def fetch_bytes(self) -> int:
        """What the download will fetch from the hub: the missing files but those whose blob is cached."""
        fetch = set(self.missing) - set(self.in_blobs)
        return sum(f.size for f in self.files if f.path in fetch)


class ImageFact(_Fact):
    """A kimik3-built image, known by its labels."""

    id: str
    tags: tuple[str, ...] = ()
    fingerprint: str | None = None
    labels: dict[str, str] = default(dict)
    smoke: Literal["passed", "failed"] | None = None  # recorded against the image fingerprint
    smoke_detail: str | None = None


class PulledImageFact(_Fact):
    """An image pulled by digest (engines whose image_source is `pull`): `ref` as the profile gives it, the local
    image that carries `digest` among its RepoDigests (None: not here), and what a pull would move: the registry
    manifest's bytes (config + layers, compressed), or why that is unknown (asked only when the image is absent)."""

    ref: str
    digest: str
    image_id: str | None = None
    pull_bytes: int | None = None
    size_unknown: str | None = None  # why the registry did not say (unreachable, needs a login, ...)


class MountFact(_Fact):
    """A bind mount as docker reports it (`Mounts`): host path, container path, read-only or not."""

    source: str
    target: str
    read_only: bool


# Flags whose value is a secret: a container recreated by hand may carry one on its command line.
SECRET_FLAGS = ("--api-key", "--hf-token")


def mask_secret_args(argv: tuple[str, ...]) -> tuple[str, ...]:
    """argv with the value after each secret flag replaced: what plans, diffs and JSON may show."""
    return tuple("(secret)" if i and argv[i - 1] in SECRET_FLAGS else arg for i, arg in enumerate(argv))


class RunningConfig(_Fact):
    """What the container was really created with (docker inspect), in `ContainerSpec`'s terms, so the
    planner compares it field by field with the rendered container. `env` leaves out what the image or
    Docker set by default (`defaults`: docker merges them into the container's Config.Env); `entrypoint`
    is None when it is the image's own."""

    image: str
    command: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] | None = None
    env: tuple[tuple[str, str], ...] = ()
    defaults: tuple[tuple[str, str], ...] = ()
    image_entrypoint: tuple[str, ...] = ()
    mounts: tuple[MountFact, ...] = ()
    gpus: str | tuple[str, ...] = "none"
    network_mode: str = ""
    ipc_mode: str = ""
    restart_policy: str = "no"

    # In JSON (`status --json`, logs) env values and secret flags never show: only names and positions.
    _json = {
        "env": lambda pairs: _names_only(pairs),
        "defaults": lambda pairs: _names_only(pairs),
        "command": lambda argv: list(mask_secret_args(argv)),
    }


def _names_only(pairs: tuple[tuple[str, str], ...]) -> list[list[str]]:
    return [[name, "(hidden)"] for name, _ in pairs]


class ContainerFact(_Fact):
    """The profile's container as docker inspect shows it, plus the /health answer."""

    id: str
    name: str
    state: Literal["created", "running", "paused", "restarting", "removing", "exited", "dead"]
    image: str = ""
    image_id: str | None = None
    fingerprint: str | None = None
    inputs: dict[str, Any] = default(dict)
    started_at: str | None = None
    exit_code: int | None = None
    restart_count: int = 0
    crash: str | None = None  # exited: the cause its log names (observe/server_log.py crash_cause), else None
    health: Literal["ok", "loading", "unreachable"] | None = None
    profile: str | None = None  # the kimik3 profile that made it (label)
    pid: int | None = None  # host pid of its main process (llama-server), as NVML reports it
    rss_bytes: int | None = None  # that process's resident memory (/proc/<pid>/status VmRSS); None: not read
    running: RunningConfig | None = None  # None: not read (planner tests that only care about labels)

    # The one place the container states are read (planners ask these, never `state in (...)`).
    @property
    def up(self) -> bool:
        """Its process runs, or dockerd is restarting it: it holds (or is about to hold) its GPUs and port."""
        return self.state in ("running", "restarting")

    @property
    def loaded(self) -> bool:
        """llama-server has read (or is reading) the model files into memory: up, or paused with them."""
        return self.up or self.state == "paused"

    @property
    def serving(self) -> bool:
        """Running with the model loaded: /health answered 200."""
        return self.state == "running" and self.health == "ok"


class PatchedFile(_Fact):
    """One file a unified diff changes: its path in the source tree (`b/` stripped) and the lines it adds."""

    path: str
    added: tuple[str, ...] = ()
    removed: int = 0


class PatchFact(_Fact):
    """One of build.patches, resolved against the profile's folder: its hash and what it changes."""

    name: str
    path: str
    sha256: str
    files: tuple[PatchedFile, ...] = ()  # from the diff's `+++` headers and hunks (observe/local_inputs.py)


class LocalInputs(_Fact):
    """Files on this machine that the profile names, hashed (they are part of fingerprints)."""

    dockerfile_path: str
    dockerfile_sha256: str
    patches: tuple[PatchFact, ...] = ()
    builtin_patches: tuple[PatchFact, ...] = ()  # kimik3's own (model/builtin_patches.py), applied before `patches`
    archive_location: str | None = None
    archive_sha256: str | None = None
    api_key_file: str | None = None
    # Why llama-server would find no usable key in api_key_file (model/api_keys.py), never the key: the launch's
    # planner refuses it; destroy, status and prune of the deployment it protects go on.
    api_key_problem: str | None = None
    draft_model: str | None = None  # serve.spec_draft.model, resolved on this host


class UnitFileFact(_Fact):
    """A unit or env file under the install root: its kimik3 header (if any) and its body as found."""

    path: str  # as systemd sees it (/etc/systemd/system/x.service), whatever the install root
    fingerprint: str | None = None  # from the `# kimik3:` header; None = kimik3 did not write it
    profile: str | None = None
    body: str = ""
    body_fingerprint: str = ""  # of the body found now: differs from `fingerprint` after a hand edit

    @property
    def edited(self) -> bool:
        return self.fingerprint is not None and self.fingerprint != self.body_fingerprint


class UnitFact(_Fact):
    """One systemd unit: its files and what `systemctl show` says about it."""

    name: str  # kimi-k3.service
    unit_file: UnitFileFact | None = None
    env_file: UnitFileFact | None = None
    load_state: str = "not-found"
    active_state: str = "inactive"  # active | inactive | failed | activating | deactivating
    sub_state: str = "dead"
    unit_file_state: str = ""  # enabled | disabled | masked | ...
    result: str = "success"
    fragment_path: str = ""  # the file systemd loaded it from (maybe /lib/systemd/system: not kimik3's)
    main_pid: int = 0  # MainPID: the service's process while it runs (the exporter unit's holds its ports)

    @property
    def profile(self) -> str | None:
        """The kimik3 profile that installed it (unit file header), None when kimik3 did not."""
        return self.unit_file.profile if self.unit_file else None


class SystemdFacts(_Fact):
    """systemd on this host: PID 1 or not, the docker CLI units run, and the units kimik3 cares about."""

    booted: bool  # systemd is PID 1 (/run/systemd/system exists)
    state: str = "offline"  # `systemctl is-system-running`
    docker_cli: str | None = None
    docker_service: str = "unknown"  # LoadState of docker.service, which kimik3's units require
    units: tuple[UnitFact, ...] = ()  # every kimik3-installed unit, plus the profile's unit name if present
    # How this kimik3 runs itself (ProcessPort.invocation): the exporter unit's ExecStart and env file.
    kimik3_argv: tuple[str, ...] = ()
    kimik3_env: dict[str, str] = default(dict)


class RpcDeviceFact(_Fact):
    """One device an rpc-server exposes, as its start-up log lists it ("CPU: … (15890 MiB, 15000 MiB free)")."""

    name: str
    description: str = ""
    total: int = 0  # bytes
    free: int = 0


class WorkerFact(_Fact):
    """One RPC worker host, seen through its own Docker (the profile's `rpc.workers[i].docker`)."""

    name: str
    docker: str
    same_daemon: bool = False  # its Docker is the main host's own daemon (same daemon ID): one image serves both
    error: str | None = None  # its Docker did not answer (ssh refused, TLS, daemon down): nothing else was read
    images: tuple[ImageFact, ...] = ()  # kimik3 images on the worker (by fingerprint label)
    container: ContainerFact | None = None  # the worker's rpc-server container
    port_open: bool | None = None  # a TCP connect from this host to bind:port succeeded (None: not tried)
    listeners: tuple[str, ...] = ()  # local addresses its host listens on at the worker's port (/proc/net/tcp)
    clients: tuple[str, ...] = ()  # remote addresses connected to that port (the main server, once loaded)
    devices: tuple[RpcDeviceFact, ...] = ()  # from the running rpc-server's log
    mem_total: int | None = None  # the worker host's RAM (docker info MemTotal): the CPU device's memory
    cpus: int | None = None
    context_bytes: int = 0  # bytes an image build there ships (source archive, patches, Dockerfile)
    cache_volume: bool = False  # its tensor cache's Docker volume (model/specs.py rpc_cache_volume) exists there


class MemberFact(_Fact):
    """One node of a replica that spans hosts (vllm.cluster / sglang.cluster), seen through its own Docker."""

    name: str
    docker: str
    error: str | None = None  # its Docker did not answer (ssh refused, TLS, daemon down): nothing else was read
    image_present: bool = False  # an image with the profile's digest is on that host (RepoDigests)
    container: ContainerFact | None = None  # the node's member container (<profile>-node-<name>)
    gpus: DockerGpus | None = None  # its Docker's GPU plumbing; None: not read (the node's gpus: none)


class RemovedWorkerFact(_Fact):
    """An RPC worker (or a cluster node's member) an apply launched (its state record) that the profile no longer
    names, seen through its recorded Docker: its rpc-server would keep listening on the network (its member keep
    running) unless it is removed."""

    name: str
    docker: str
    tls_dir: str | None = None
    container_name: str
    container: ContainerFact | None = None  # None: no rpc-server of that name there any more
    error: str | None = None  # its Docker did not answer: nothing else was read
    cache_volume: bool = False  # its tensor cache's Docker volume (model/specs.py rpc_cache_volume) exists there


class ExporterFact(_Fact):
    """The metrics exporter (or the front, issue 29) kimik3 started for this profile (its state record), and whether
    it still runs."""

    pid: int
    fingerprint: str  # of the configuration it was started with (the record)
    config: dict[str, Any] = default(dict)
    alive: bool = False  # the pid runs `kimik3 metrics-serve <profile>` (not a recycled pid)
    serving: str | None = None  # the fingerprint its /healthz answers; None: not answering
    unit: str | None = None  # the systemd unit that runs it (profile with `systemd:`); pid is then 0
    # It offers its listening sockets to its replacement (records.HANDS_OVER_SOCKETS): replaced without closing its
    # ports. False: started by a kimik3 before that (stopped, then its replacement started).
    hands_over_sockets: bool = False


class HostSettingsFact(_Fact):
    """The host settings kimik3 persists (`host.prepare`, issue 27 item 5): its sysctl.d file as systemd's host
    has it, and each setting's live value (/proc/sys) there."""

    file_text: str | None = None  # None: no such file
    live: dict[str, str | None] = default(dict)  # kernel.numa_balancing -> "0"; None: the kernel has no such knob
    # (path, key, value): sysctl.d files that a boot loads after kimik3's and that set one of its keys otherwise
    overridden_by: tuple[tuple[str, str, str], ...] = ()


class Observed(_Fact):
    """Everything the planner may look at; nothing else reaches it."""

    host: HostFacts = default(HostFacts)
    inputs: LocalInputs
    model: ModelFact
    tokenizer: ModelFact | None = None
    layout: ModelLayout | None = None
    layout_recorded: bool = False  # read from its state record (else from the GGUF headers: the model step records it)
    reference: ModelFact | None = None  # gate.quant.reference_quant's files, when the gate applies
    gate_records: dict[str, dict[str, Any]] = default(
        dict
    )  # image fingerprint -> result  # from the quant's GGUF headers (ranged reads or the cache)  # model.tokenizer: non-weight files of an HF-format repo
    images: tuple[ImageFact, ...] = ()
    pulled: PulledImageFact | None = None  # the image by digest, for an engine that pulls it (else None)
    base_images: dict[str, str | None] = default(dict)  # ref -> local image id
    base_digests: dict[str, str | None] = default(dict)  # ref -> its repo digest here (RepoDigests)
    runtime_cuda: str | None = None  # CUDA_VERSION of the runtime base image, when pulled (the driver floor)
    container: ContainerFact | None = None
    unverified: str | None = None  # fingerprint of a container launched but not verified yet (state record)
    last_good: str | None = None  # when this profile name last converged and passed verify (revert target)
    load_rate: float | None = None  # bytes/s of the last measured model load on this host (state record)
    warm_load_rate: float | None = None  # bytes/s of the last load here after a pre-read (state record)
    # (bytes, seconds) of this container's last load here, from its start to /health 200 (load/<name>.json)
    last_load: tuple[int, float] | None = None
    checkpoint_config: CheckpointConfig | None = None  # a safetensors checkpoint's config.json; None: not read
    build_time: float | None = None  # seconds of the last full compile of the profile's variant here (state record)
    cached_build_time: float | None = None  # seconds of its last build answered by Docker's layer cache (record)
    others: tuple[ContainerFact, ...] = ()  # other profiles' kimik3 containers on this host
    slots_volume: bool = False  # the Docker volume of its saved slots (serve.slot_save) exists, whatever serve says now
    systemd: SystemdFacts | None = None  # None: not looked at (no systemd section, no kimik3 unit)
    gpu_plumbing: GpuPlumbing | None = None  # None: not looked at (gpus: none, or a pure test)
    gpu_probe_record: dict[str, Any] | None = None  # the passing probe record of this (driver, toolkit, request)
    workers: tuple[WorkerFact, ...] = ()  # the profile's RPC workers, in profile order (none without `rpc:`)
    removed_workers: tuple[RemovedWorkerFact, ...] = ()  # recorded RPC workers the profile no longer names
    members: tuple[MemberFact, ...] = ()  # a cluster's nodes, in rank order (none without vllm/sglang.cluster)
    removed_members: tuple[RemovedWorkerFact, ...] = ()  # recorded members of nodes the profile no longer names
    # The addresses with a live raylet in Ray's node table, read through the head's running container (vllm.cluster);
    # None: not read (no cluster, no Ray, the head's container not running, or the read failed: `ray_error`).
    ray_alive: tuple[str, ...] | None = None
    ray_error: str | None = None
    exporter: ExporterFact | None = None  # None: no exporter record (never started, or removed)
    host_settings: HostSettingsFact | None = None  # None: not looked at (no `host.prepare`)
    front: ExporterFact | None = None  # metrics.handover's front process (same shape); None: no front record
