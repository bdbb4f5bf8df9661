"""RPC workers (issue 18): each worker host seen through its own Docker, plus a TCP connect from here.

Per worker: its daemon (ID, RAM, CPUs), kimik3's images there, the rpc-server container (its worker
fingerprint label), the devices its log lists with their memory, the addresses its host listens on
at the worker's port (read in the container: host networking shares the host's /proc/net/tcp), and
whether this host can connect to bind:port. A Docker that does not answer is recorded, not raised:
the planner refuses with the worker named.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from kimik3_reconciler.errors import Kimik3Error
from kimik3_reconciler.model.facts import LocalInputs, RemovedWorkerFact, RpcDeviceFact, WorkerFact
from kimik3_reconciler.model.labels import WORKER_FINGERPRINT, WORKER_INPUTS
from kimik3_reconciler.model.profile import Profile, RpcWorker
from kimik3_reconciler.model.records import rpc_workers_key
from kimik3_reconciler.model.specs import DockerHost, rpc_cache_volume
from kimik3_reconciler.observe.docker_objects import collect_images, parse_labelled_container
from kimik3_reconciler.observe.host import parse_tcp_clients, parse_tcp_listeners
from kimik3_reconciler.observe.removed_remote import collect_removed
from kimik3_reconciler.ports import DockerPort, HostPort, StatePort

# tools/rpc/rpc-server.cpp prints each exposed device: "  CPU: AMD EPYC 9654 (515890 MiB, 500000 MiB free)"
_DEVICE = re.compile(r"^\s+(\S+): (.*) \((\d+) MiB, (\d+) MiB free\)\s*$", re.M)
_LOG_TAIL = 200
MIB = 1 << 20


def parse_rpc_devices(log: str) -> tuple[RpcDeviceFact, ...]:
    """The devices an rpc-server's start-up log lists (the last start's, when it restarted)."""
    start = log.rfind("Starting RPC server")
    found = _DEVICE.findall(log[start:] if start >= 0 else log)
    return tuple(RpcDeviceFact(name=n, description=d, total=int(t) * MIB, free=int(f) * MIB) for n, d, t, f in found)


def context_bytes(inputs: LocalInputs) -> int:
    """What an image build on a worker ships: the Dockerfile, the patches and the source archive (when local)."""
    paths = [inputs.dockerfile_path, *(p.path for p in (*inputs.builtin_patches, *inputs.patches))]
    if inputs.archive_location and not inputs.archive_location.startswith(("http://", "https://")):
        paths.append(inputs.archive_location)
    return sum(Path(p).stat().st_size for p in paths if Path(p).is_file())


def collect_worker(
    profile: Profile,
    worker: RpcWorker,
    docker: DockerPort,
    host: HostPort,
    state: StatePort,
    main_daemon: str | None,
    shipped: int,
) -> WorkerFact:
    fact = WorkerFact(name=worker.name, docker=worker.docker, context_bytes=shipped)
    try:
        info = docker.info()
        name = worker.container_name(profile.name)
        inspect = docker.inspect_container(name)
        fact = fact.model_copy(
            update={
                "same_daemon": bool(main_daemon) and info.get("ID") == main_daemon,
                "mem_total": info.get("MemTotal"),
                "cpus": info.get("NCPU"),
                "images": collect_images(docker, state),
                "cache_volume": docker.inspect_volume(rpc_cache_volume(profile.name, worker.name)) is not None,
            }
        )
        if inspect is None:
            return fact
        container = parse_labelled_container(inspect, WORKER_FINGERPRINT, WORKER_INPUTS)
        fact = fact.model_copy(update={"container": container})
        if container.state != "running":
            return fact
        try:
            tables = docker.exec_output(name, ["cat", "/proc/net/tcp", "/proc/net/tcp6"])
        except Kimik3Error:  # it stopped or began restarting since the inspect: its sockets are unknown now
            return fact.model_copy(update={"port_open": False})
        clients = parse_tcp_clients(tables, worker.port)
        return fact.model_copy(
            update={
                "devices": parse_rpc_devices(docker.container_logs(name, _LOG_TAIL)),
                "listeners": tuple(sorted(set(parse_tcp_listeners(tables, worker.port).values()))),
                "clients": clients,
                # rpc-server serves one client at a time with a backlog of 1: while the main server is connected a
                # probe would wait in that backlog (and a second one be dropped). A connected client proves the
                # port reachable; only an idle worker is probed.
                "port_open": True if clients else host.tcp_connect(worker.bind, worker.port),
            }
        )
    except Kimik3Error as exc:
        return fact.model_copy(update={"error": str(exc)})


def collect_workers(
    profile: Profile,
    worker_docker: Callable[[DockerHost], DockerPort] | None,
    main: DockerPort,
    host: HostPort,
    state: StatePort,
    inputs: LocalInputs,
) -> tuple[WorkerFact, ...]:
    if not profile.workers:
        return ()
    if worker_docker is None:
        raise Kimik3Error("the profile has rpc workers but no way to reach their Docker was wired")
    main_daemon = main.info().get("ID")
    shipped = context_bytes(inputs)
    return tuple(
        collect_worker(
            profile, w, worker_docker(DockerHost(w.name, w.docker, w.tls_dir)), host, state, main_daemon, shipped
        )
        for w in profile.workers
    )


def recorded_workers(state: StatePort, profile_name: str) -> list[dict[str, str | None]]:
    """The workers applies of this profile launched ({"name", "docker", "tls_dir", "container"} each)."""
    return list((state.read(rpc_workers_key(profile_name)) or {}).get("workers") or [])


def collect_removed_workers(
    profile: Profile, worker_docker: Callable[[DockerHost], DockerPort] | None, state: StatePort
) -> tuple[RemovedWorkerFact, ...]:
    """Recorded workers whose (Docker, container) the profile no longer names, each seen through its own Docker
    with its tensor-cache volume there. A Docker that does not answer is recorded, not raised: the planner refuses
    with the worker named."""
    named = {(w.docker, w.container_name(profile.name)) for w in profile.workers}
    still_named = {w.container_name(profile.name): DockerHost(w.name, w.docker, w.tls_dir) for w in profile.workers}
    dropped = [e for e in recorded_workers(state, profile.name) if (e.get("docker"), e.get("container")) not in named]

    def cache_volume(docker: DockerPort, fact: RemovedWorkerFact) -> RemovedWorkerFact:
        if docker.inspect_volume(rpc_cache_volume(profile.name, fact.name)) is None:
            return fact
        return fact.model_copy(update={"cache_volume": True})

    return collect_removed(
        dropped, still_named, worker_docker, "no way to reach worker Docker hosts was wired", cache_volume
    )
