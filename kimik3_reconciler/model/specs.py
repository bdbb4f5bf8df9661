"""Step payloads: what an executor needs to make one step true, rendered by the planner.

Every payload is a frozen dataclass deriving from `Payload`, and its type alone picks the executor
(steps/__init__.py's table): a step that changes something carries exactly one of these. Adding a
step kind = one payload here, one planner function, one executor, one case file.

`@frozen_value` is `@dataclass(frozen=True)` whose `__eq__`, `__hash__` and `__repr__` are `_Value`'s,
written once instead of generated and compiled for each class (~0.25 ms a class at every start: docs/measurements.md
"A no-op plan"); they behave as the generated ones. A plain `@dataclass(frozen=True)` works too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from kimik3_reconciler.model.engine_names import DEFAULT_ENGINE
from kimik3_reconciler.model.facts import FileStat, ModelLayout, RemoteFile


class _Value:
    """__eq__, __hash__ and __repr__ as @dataclass(frozen=True) generates them: by the fields, in order."""

    __slots__ = ()

    def _fields(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f.name) for f in fields(self))  # type: ignore[arg-type]

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))  # type: ignore[arg-type]
        return f"{type(self).__qualname__}({shown})"


def frozen_value(cls: type) -> type:
    """@dataclass(frozen=True) with `_Value`'s comparison, hash and repr (the class must derive from it)."""
    return dataclass(frozen=True, eq=False, repr=False)(cls)


class Payload(_Value):
    """Base of every step payload; `steps.EXECUTORS` maps each subclass to its executor.

    What an apply must know of a step it learns from these class attributes, never from the payload's type
    (so neither a new step kind nor a new serving engine changes the orchestrator):
    - `starts_server`: the step (re)launches or starts the serving container; the apply that ran it verifies
      that launch at its end (its own check), so a `checks` step of the same apply is left out;
    - `checks`: the step runs the apply's check (`Ports.verifier`, `kimik3 verify`); left out of an apply that
      has none (--no-verify-server: the launch stays unverified for a later apply);
    - `waits`: the step waits on a load rather than decides something; an apply of a saved plan runs the fresh
      plan's waits too (the plan was made while the server was loading);
    - `stops_server` / `takes_server_down()`: after the step no server may answer until a later launch is healthy
      (a stop, a removal, a replacing launch): the apply checks the state dir's room before it and reverts to the
      last good profile after any failure that follows it (model/state_room.py, issue 30);
    - `holds_clients`: the step told the front to hold new requests (issue 29); the apply releases them when it
      ends, after its check or its revert, whatever way it ends (`steps.front.release_clients`);
    - `rebuilt_records()`: records the plan rebuilt from what is on the host (a record an older kimik3 wrote in
      another shape, or none at all): an apply keeps them even when the step is a NOOP, so keeping them is never a
      pending change (`plan --detailed-exitcode` stays 0 after an upgrade; issue 38 item 3).
    """

    __slots__ = ()
    starts_server: ClassVar[bool] = False
    checks: ClassVar[bool] = False
    waits: ClassVar[bool] = False
    stops_server: ClassVar[bool] = False
    holds_clients: ClassVar[bool] = False

    def takes_server_down(self) -> bool:
        """Whether no server answers after this step until a later launch is healthy (`stops_server` unless a
        payload's own fields decide, as a launch's `replace` does)."""
        return self.stops_server

    def rebuilt_records(self) -> tuple[tuple[str, dict[str, Any]], ...]:
        """(state key, record) pairs rebuilt from the host that an apply writes whatever the step's action."""
        return ()


def _layout_record(layout: ModelLayout | None, key: str | None) -> tuple[tuple[str, dict[str, Any]], ...]:
    """The quant's layout, read from the cached GGUF headers, as its state record (none when not read)."""
    return ((key, layout.model_dump(mode="json")),) if layout is not None and key else ()


# --- the model cache -----------------------------------------------------------------------------


@frozen_value
class ModelDownload(Payload):
    """Fetch these files of repo@revision into the HF cache, then verify their sha256; record the
    manifest with the stat fingerprints of the fetched files and of `verified` (the files observation
    found good, with the stat they had then; nothing missing = only record those)."""

    repo: str
    revision: str
    quant: str
    endpoint: str | None
    cache_dir: str
    files: tuple[RemoteFile, ...]
    missing: tuple[str, ...]
    manifest_key: str
    verified: tuple[FileStat, ...] = ()
    layout: ModelLayout | None = None  # what the plan read from the GGUF headers, recorded at `layout_key`
    layout_key: str | None = None

    @property
    def bytes_to_fetch(self) -> int:
        missing = set(self.missing)
        return sum(f.size for f in self.files if f.path in missing)

    def rebuilt_records(self) -> tuple[tuple[str, dict[str, Any]], ...]:
        # Only from files already here: a layout read from the hub (files missing) is recorded by the download.
        return () if self.missing else _layout_record(self.layout, self.layout_key)


@frozen_value
class LocalModelVerify(Payload):
    """Record the sha256 manifest of a local model (`model.local_path`): its files as this plan hashed them (or
    found them unmoved since they were recorded). The step re-checks each file's stat fingerprint against `stats`
    and re-hashes a file that moved since the plan: one that no longer matches stops the apply before the launch."""

    local_path: str  # as resolved: the file or folder the profile names
    folder: str  # the folder holding the files
    quant: str
    files: tuple[RemoteFile, ...]  # `<quant>/<name>`, with the sha256 the plan found
    stats: tuple[FileStat, ...]  # their stat fingerprints when the plan read them
    manifest_key: str
    layout: ModelLayout | None = None  # what the plan read from the GGUF headers, recorded at `layout_key`
    layout_key: str | None = None

    def rebuilt_records(self) -> tuple[tuple[str, dict[str, Any]], ...]:
        return _layout_record(self.layout, self.layout_key)


@frozen_value
class RemoveModelFiles(Payload):
    """destroy --model: drop the cached files of one quant (blobs other revisions share stay) and its manifest."""

    download: ModelDownload


# --- images --------------------------------------------------------------------------------------


@frozen_value
class ImageBuild(Payload):
    """docker build of Dockerfile.llamacpp for one source pin; `fingerprint` becomes a label."""

    tag: str
    fingerprint: str
    source: str
    commit: str
    dockerfile: str
    archive: str
    archive_sha256: str | None
    patches: tuple[tuple[str, str], ...]  # (context name NN-x.patch, host path)
    build_args: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str], ...]
    variant: str = "cuda"  # build.variant: the build's duration is recorded per variant (host/build-time-<variant>)
    # Read the model into the page cache while dockerd compiles (issue 15): set by the image planner when a launch
    # of these weights follows and RAM holds them; the executor joins it before returning, and never fails on it.
    preread: PagecachePreread | None = None


@frozen_value
class RetagImage(Payload):
    """Point `tag` back at a kept build with the wanted fingerprint: a rollback without compiling."""

    image_id: str
    tag: str


@frozen_value
class ImagePull(Payload):
    """Pull `by_digest` (`repository@sha256:…`) for an engine whose image is pulled, not built; the pulled image's
    RepoDigests must hold `digest`. `ref`: the profile's image.ref (its tag for people), named in every error."""

    ref: str
    by_digest: str
    digest: str


@frozen_value
class RemoveImage(Payload):
    """Remove one image (destroy --images, prune)."""

    ref: str


# --- containers ----------------------------------------------------------------------------------


@frozen_value
class Mount(_Value):
    source: str
    target: str
    read_only: bool = True


@frozen_value
class ContainerSpec(_Value):
    """The rendered container: argv items (never a shell string), env, mounts, GPUs, labels."""

    name: str
    image: str
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    mounts: tuple[Mount, ...]
    gpus: str | tuple[str, ...]  # "none" | "all" | device ids
    labels: tuple[tuple[str, str], ...]
    network_mode: str = "host"
    ipc_mode: str = "host"
    restart_policy: str = "unless-stopped"
    entrypoint: tuple[str, ...] | None = None  # e.g. /app/llama-perplexity for the quant gate
    # How `gpus` are asked of Docker: "cdi" = --device nvidia.com/gpu=<id> (seed 000), "runtime" = --gpus
    # through the nvidia runtime. Which GPUs, not how: left out of the container fingerprint and the drift.
    gpu_request: str = "runtime"
    volumes: tuple[tuple[str, str], ...] = ()  # (Docker named volume, target): an rpc-server's tensor cache


@frozen_value
class LaunchContainer(Payload):
    """Create the profile's container; `replace`: remove the one of that name first (GPUs and port are exclusive)."""

    starts_server = True

    container: ContainerSpec
    replace: bool = False

    def takes_server_down(self) -> bool:
        return self.replace  # the old container is removed before the new one answers

    def to_json(self) -> dict[str, Any]:
        """The rendered container itself (argv, env, mounts, GPUs, labels), as `plan --json` always showed it."""
        return {**asdict(self.container), "replace": self.replace}


@frozen_value
class StartContainer(Payload):
    """Start (or unpause) the existing container: its fingerprint matches, only its state is wrong."""

    starts_server = True

    name: str


@frozen_value
class StopContainer(Payload):
    """Stop a container and keep it (a conflicting profile's, or ours before the quant gate)."""

    stops_server = True

    name: str


@frozen_value
class RemoveContainer(Payload):
    """Remove the profile's container (destroy)."""

    stops_server = True

    name: str


def slots_volume(name: str) -> str:
    """The Docker volume that keeps a deployment's saved slots (serve.slot_save) through a container swap."""
    return f"kimik3-slots-{name}"


def rpc_cache_volume(profile: str, worker: str) -> str:
    """The Docker volume on an RPC worker's host that keeps its rpc-server's tensor cache (rpc.workers[].cache without
    cache_dir) through a relaunch."""
    return f"kimik3-rpc-cache-{profile}-{worker}"


@frozen_value
class RemoveVolume(Payload):
    """Remove one of the deployment's Docker volumes (destroy --slots: its saved slots)."""

    name: str


@frozen_value
class ForgetDeployment(Payload):
    """Delete the records that would bring a destroyed deployment back (destroy, issue 30): the last good profile (a
    later failing apply reverts to it) and a launch's owed verify. Keys in the state dir (model/records.py)."""

    keys: tuple[str, ...]


@frozen_value
class SmokeTest(Payload):
    """Run a tiny generated kimi-k3 GGUF on a new image with the seed's fixed flags (gate.smoke)."""

    container: str
    image: str
    image_fingerprint: str
    command: tuple[str, ...]  # without --host/--port: the executor picks a free loopback port
    gpus: str | tuple[str, ...]
    labels: tuple[tuple[str, str], ...]
    gpu_request: str = "runtime"  # as ContainerSpec.gpu_request
    engine: str = DEFAULT_ENGINE  # whose smoke model the executor writes (engines/base.py SmokeModel)


@frozen_value
class QuantGateRun(Payload):
    """llama-perplexity from the profile's image: reference logits once, then the candidate's KLD."""

    image: str
    image_fingerprint: str
    reference_repo_dir: str
    reference_model: str  # path inside the repo's snapshots/
    candidate_repo_dir: str
    candidate_model: str
    revision: str
    gpus: str | tuple[str, ...]
    # The server's owned flags (planning/launch.py runtime_flags + placement), rendered by the planner:
    # llama-perplexity loads the same real quant, so the same 20-minute stall awaits it without them.
    reference_flags: tuple[str, ...]
    candidate_flags: tuple[str, ...]
    max_kld: float
    min_top_token_agreement: float
    record_key: str
    logits_key: str
    gpu_request: str = "runtime"  # as ContainerSpec.gpu_request
    engine: str = DEFAULT_ENGINE  # whose scorer runs (engines/base.py QuantScorer)


@frozen_value
class GpuProbe(Payload):
    """Seed 000 step 1's check that GPU containers work: a real container runs `nvidia-smi -L` with the
    profile's GPUs, requested as the launch will request them; a pass is recorded per (driver, toolkit)."""

    container: str
    image: str  # any image: the toolkit injects nvidia-smi and the driver's libraries
    gpus: str | tuple[str, ...]
    gpu_request: str  # "cdi" | "runtime"
    expected_gpus: int  # how many GPUs the container must list
    record_key: str
    driver: str | None
    toolkit: str | None
    labels: tuple[tuple[str, str], ...] = ()


@frozen_value
class HealthWait(Payload):
    """Wait until llama-server answers /health 200 (model loaded), or fail with its log tail."""

    waits = True

    container: str
    url: str
    timeout_s: float
    model_bytes: int = 0  # recorded with the measured load time: the next plan predicts downtime from it
    warm: bool = False  # a pre-read planned before the launch: the load reads the page cache (recorded as warm)
    unit: str | None = None  # the profile's systemd unit, stopped with a failed launch (Restart=on-failure loops)
    # Bytes a partial pre-read leaves in the cache (issue 27): such a load is neither warm nor cold, and its rate is
    # recorded as neither (it would make the next plan's cold or warm prediction wrong). None: no partial pre-read.
    partial_bytes: int | None = None
    # model.local_path's file when the profile serves one: a GGUF that cannot be read is then the user's file to
    # make again, not a cache to re-hash (observe/server_log.py). None: the hub's files in the cache.
    local_model: str | None = None
    engine: str = DEFAULT_ENGINE  # whose log signs name a failed load's cause (engines/base.py LogSigns)


# --- RPC workers (other hosts, each reached through its own Docker) --------------------------------


@frozen_value
class DockerHost(_Value):
    """A worker host's Docker, as the profile names it: ssh://user@host or tcp://host:port (+ TLS folder)."""

    name: str
    url: str
    tls_dir: str | None = None


@frozen_value
class WorkerImage(Payload):
    """Build the profile's image on a worker from the same context (source, patches, Dockerfile), or re-tag
    a kept build there (`retag_id`); `context_bytes` is what a build ships to that host."""

    host: DockerHost
    build: ImageBuild
    context_bytes: int
    retag_id: str | None = None


@frozen_value
class WorkerLaunch(Payload):
    """Create the worker's rpc-server container; `replace`: remove the one of that name first."""

    host: DockerHost
    container: ContainerSpec
    replace: bool = False

    def takes_server_down(self) -> bool:
        return self.replace  # the running server loses the tensors it keeps on that worker

    def to_json(self) -> dict[str, Any]:
        return {"host": asdict(self.host), **asdict(self.container), "replace": self.replace}


@frozen_value
class WorkerWait(Payload):
    """Wait until the worker's rpc-server accepts TCP connections at address:port (from this host)."""

    host: DockerHost
    container: str
    address: str
    port: int
    timeout_s: float


@frozen_value
class WorkerRemove(Payload):
    """Remove a worker's rpc-server container (destroy, or a worker the profile no longer names), then drop it
    from `profile`'s record of launched workers (model/records.py rpc_workers_key)."""

    host: DockerHost
    name: str
    profile: str = ""


@frozen_value
class WorkerVolumeRemove(Payload):
    """Remove an RPC worker's tensor-cache volume (`rpc_cache_volume`) through that worker's Docker (destroy
    --model)."""

    host: DockerHost
    name: str


# --- a replica over several hosts (vllm.cluster / sglang.cluster: each node reached through its own Docker) ---


@frozen_value
class MemberImage(Payload):
    """Pull the profile's image by digest on a cluster node (`pull`: the same payload as the head's pull)."""

    host: DockerHost
    pull: ImagePull


@frozen_value
class MemberCheckpoint(Payload):
    """Check that a node sees the checkpoint the head verified, at the same path: a short-lived container of the
    profile's image there lists the mounted snapshot's files and sizes; `files`: (path, size) the head verified."""

    host: DockerHost
    container: ContainerSpec
    snapshot: str
    files: tuple[tuple[str, int], ...]


@frozen_value
class MemberLaunch(Payload):
    """Create a node's member container; `replace`: remove the one of that name first."""

    host: DockerHost
    container: ContainerSpec
    replace: bool = False

    def takes_server_down(self) -> bool:
        return self.replace  # the replica's server runs ranks on that node: it goes with it

    def to_json(self) -> dict[str, Any]:
        return {"host": asdict(self.host), **asdict(self.container), "replace": self.replace}


@frozen_value
class MemberWait(Payload):
    """Wait until Ray's node table, read through the head's container, shows a live raylet at every address."""

    head: str
    addresses: tuple[str, ...]
    timeout_s: float


@frozen_value
class MemberRemove(Payload):
    """Remove a node's member container (destroy; apply for a node the profile no longer names); `profile`: forget it
    from that profile's record of launched members (model/records.py cluster_members_key) once removed."""

    host: DockerHost
    name: str
    profile: str = ""


@frozen_value
class PagecachePreread(Payload):
    """Read the model's files into the page cache before a launch loads them, while the old server still serves
    (or, as `ImageBuild.preread`, while the image compiles), so the load reads memory, not disk (issue 15). Files
    the cache already holds are not read again; then say how much of them it holds (mincore)."""

    files: tuple[str, ...]  # host paths (the HF cache's snapshot links)
    total_bytes: int
    workers: int = 4  # parallel readers (bench/load.py measured 1-8: docs/operations.md)
    sizes: tuple[int, ...] = ()  # each file's bytes, as listed (the progress total); () in plans saved before
    # A partial pre-read (issue 27): only the first this many bytes, the files in the order the server opens them
    # (the last one up to where the limit falls): what the page cache keeps beside the running server. None: all.
    limit_bytes: int | None = None


# --- systemd -------------------------------------------------------------------------------------


@frozen_value
class HostSettings(Payload):
    """Persist kernel settings in a sysctl.d file and load it (host.prepare, issue 27 item 5); `write`: the file
    differs (else only loaded again: a live value moved)."""

    path: str  # /etc/sysctl.d/90-kimik3.conf, as systemd's host sees it
    text: str
    settings: tuple[tuple[str, str], ...]  # (key, value) the load must leave live
    write: bool = True


@frozen_value
class UnitInstall(Payload):
    """Make the profile's unit true: write what differs, daemon-reload, enable or disable, start."""

    unit: str  # kimi-k3.service
    profile: str
    unit_path: str
    unit_text: str
    env_path: str
    env_text: str
    enable: bool
    write_unit: bool
    write_env: bool
    reload: bool  # daemon-reload: the unit file was (re)written, or systemd has not loaded it yet
    restart: bool = False  # `systemctl restart`, not `start`: the running service must pick up new settings


@frozen_value
class UnitRemoval(Payload):
    """Stop, disable and delete a unit kimik3 installed (and its env file, when that is kimik3's too)."""

    stops_server = True

    unit: str
    unit_path: str
    env_path: str | None  # None: the env file is absent or not kimik3's, so it is left alone
    systemctl: bool = True  # False when systemd is not running: only the files go


@frozen_value
class StopUnit(Payload):
    """`systemctl stop` a unit that supervises a conflicting container (stopping only the container,
    systemd's Restart=on-failure would start it again)."""

    stops_server = True

    unit: str


@frozen_value
class VerifyServer(Payload):
    """Run `kimik3 verify` against a container an earlier apply launched and never verified (it died or lost
    dockerd in the health wait); a pass clears its `unverified/` record."""

    checks = True

    container: str
    fingerprint: str  # the launch the record names: a newer launch's record is left for its own verify


PAYLOADS: tuple[type[Payload], ...] = (
    ModelDownload,
    LocalModelVerify,
    RemoveModelFiles,
    ImageBuild,
    ImagePull,
    RetagImage,
    RemoveImage,
    LaunchContainer,
    StartContainer,
    StopContainer,
    RemoveContainer,
    RemoveVolume,
    ForgetDeployment,
    SmokeTest,
    QuantGateRun,
    GpuProbe,
    HealthWait,
    UnitInstall,
    UnitRemoval,
    StopUnit,
    PagecachePreread,
    HostSettings,
    VerifyServer,
    WorkerImage,
    WorkerLaunch,
    WorkerWait,
    WorkerRemove,
    WorkerVolumeRemove,
    MemberImage,
    MemberCheckpoint,
    MemberLaunch,
    MemberWait,
    MemberRemove,
)


# --- the metrics exporter (issue 17) ----------------------------------------------------------------


@frozen_value
class HelperRun(_Value):
    """The fields of a detached helper's start (ExporterRun, FrontRun; model/helpers.py): not a payload itself."""

    profile: str
    config: dict[str, Any]  # the helper's config (model/helpers.py Helper.config).to_json(), the config record
    fingerprint: str
    health_url: str
    replace_pid: int | None = None
    timeout_s: float = 30.0
    # The helper it replaces offers its listening sockets (issue 38 item 2): the new one starts while it serves
    # and takes them, so the public port never refuses a client; then the old one is stopped.
    hand_over: bool = False


@frozen_value
class ExporterRun(HelperRun, Payload):
    """Start `kimik3 metrics-serve <profile>` (stopping `replace_pid`, the exporter it replaces, first), wait
    until its /healthz answers `fingerprint`, and record it (pid, fingerprint, config: model/metrics.py
    ExporterConfig.to_json())."""


@frozen_value
class ExporterStop(Payload):
    """Stop the profile's exporter (destroy, or `metrics:` removed) and delete its records."""

    profile: str
    pid: int


@frozen_value
class ExporterUnit(Payload):
    """The exporter as a systemd unit (profile with `systemd:`): stop `stop_pid` (a detached exporter it
    replaces), write the config record, install and (re)start `install` (the unit machinery), wait until
    /healthz answers `fingerprint`, record it (unit, fingerprint, config)."""

    profile: str
    config: dict[str, Any]
    fingerprint: str
    health_url: str
    install: UnitInstall
    stop_pid: int | None = None
    timeout_s: float = 30.0


PAYLOADS = (*PAYLOADS, ExporterRun, ExporterStop, ExporterUnit)


# --- the front (issue 29, metrics.handover) ----------------------------------------------------------


@frozen_value
class FrontRun(HelperRun, Payload):
    """Start `kimik3 front-serve <profile>` (stopping `replace_pid`, the front it replaces, first; its token record
    made once), wait until its control /healthz answers `fingerprint`, and record it (pid, fingerprint, config:
    model/front.py FrontConfig.to_json()); `hand_over`: the front it replaces hands its socket on serve.port over."""


@frozen_value
class FrontStop(Payload):
    """Stop the profile's front (metrics.handover removed, destroy) and delete its records."""

    profile: str
    pid: int


@frozen_value
class FrontHold(Payload):
    """Before the server is taken down: the front stops sending new requests to it, lets those in flight finish
    (up to `order["drain_s"]`) and holds new ones until the apply releases them."""

    holds_clients: ClassVar[bool] = True
    profile: str
    control_url: str  # the front's control paths (model/front.py FrontConfig.control_url)
    order: dict[str, Any]  # model/front.py HoldOrder.to_json()


@frozen_value
class FrontUnit(Payload):
    """The front as a systemd unit (profile with `systemd:`, issue 38 item 12), as ExporterUnit is the exporter's:
    stop `stop_pid` (a detached front it replaces), make the token record once, write the config record, install
    and (re)start `install`, wait until the control /healthz answers `fingerprint`, record it (unit, fingerprint)."""

    profile: str
    config: dict[str, Any]  # model/front.py FrontConfig.to_json()
    fingerprint: str
    health_url: str
    install: UnitInstall
    stop_pid: int | None = None
    timeout_s: float = 30.0


PAYLOADS = (*PAYLOADS, FrontRun, FrontStop, FrontHold, FrontUnit)
