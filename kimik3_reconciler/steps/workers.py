"""RPC workers (issue 18): build or re-tag the image on a worker host, launch or remove its rpc-server,
wait for its port. Every effect goes through that host's own Docker (`ports.worker_docker(host)`)."""

from __future__ import annotations

import copy
import json

from kimik3_reconciler.errors import LoadFailed, PlanError
from kimik3_reconciler.model.labels import PROFILE_LABEL, WORKER_INPUTS
from kimik3_reconciler.model.records import rpc_workers_key
from kimik3_reconciler.model.specs import (
    DockerHost,
    WorkerImage,
    WorkerLaunch,
    WorkerRemove,
    WorkerVolumeRemove,
    WorkerWait,
)
from kimik3_reconciler.ports import DockerPort, Ports, StatePort
from kimik3_reconciler.steps.image import build_image, pin_tag
from kimik3_reconciler.steps.report import Reporter

_LOG_TAIL = 40
_LOOK_EVERY_S = 5.0
_RESTARTS = 2  # rpc-server listens within a second of starting: restarting twice is a crash loop


def worker_docker(ports: Ports, host: DockerHost) -> DockerPort:
    if ports.worker_docker is None:
        raise PlanError(f"rpc worker {host.name}: no Docker connection to workers is wired")
    return ports.worker_docker(host)


def _on_worker(ports: Ports, host: DockerHost) -> Ports:
    """The same ports with the worker's Docker: an image step runs there exactly as on the main host."""
    moved = copy.copy(ports)
    moved.docker = worker_docker(ports, host)
    return moved


def worker_image(spec: WorkerImage, ports: Ports, reporter: Reporter) -> None:
    docker = worker_docker(ports, spec.host)
    if spec.retag_id is not None:
        docker.tag_image(spec.retag_id, spec.build.tag)
        reporter.event("retagged", worker=spec.host.name, image=spec.retag_id[:19], tag=spec.build.tag)
        return
    reporter.event("build", worker=spec.host.name, tag=spec.build.tag, ships_bytes=spec.context_bytes)
    # Not this host's build time: the worker's CPUs compile, so nothing is recorded in this host's records.
    build_image(spec.build, _on_worker(ports, spec.host), reporter, this_host=False)


def launch_worker(spec: WorkerLaunch, ports: Ports, reporter: Reporter) -> None:
    docker, name = worker_docker(ports, spec.host), spec.container.name
    if spec.replace:
        docker.remove_container(name)
        reporter.event("removed", worker=spec.host.name, container=name)
    inputs = json.loads(dict(spec.container.labels).get(WORKER_INPUTS) or "{}")
    pin_tag(docker, spec.container.image, inputs.get("image.fingerprint"), reporter)
    profile = dict(spec.container.labels).get(PROFILE_LABEL, "")
    # Recorded before it runs: an apply interrupted after this launch still knows the worker to remove.
    remember_workers(ports.state, profile, ((spec.host, name),))
    container_id = docker.run_container(spec.container)
    reporter.event("launched", worker=spec.host.name, container=name, id=container_id[:12])


def wait_for_worker(spec: WorkerWait, ports: Ports, reporter: Reporter) -> None:
    docker = worker_docker(ports, spec.host)
    deadline = ports.clock.monotonic() + spec.timeout_s
    next_look = ports.clock.monotonic()
    while not ports.host.tcp_connect(spec.address, spec.port):
        now = ports.clock.monotonic()
        if now >= next_look or now > deadline:
            # The worker's state over its Docker, every few seconds only: over ssh each look is a login.
            inspect = docker.inspect_container(spec.container) or {}
            state = (inspect.get("State") or {}).get("Status")
            looping = state == "restarting" or inspect.get("RestartCount", 0) >= _RESTARTS
            if state not in ("running", "created", "restarting") or looping or now > deadline:
                # Its log says why (a bind refused, no devices, no binary): the main server must not start without it.
                raise LoadFailed(
                    f"rpc-server {spec.container} on {spec.host.name} does not accept connections at "
                    f"{spec.address}:{spec.port} (container {state}, "
                    f"{inspect.get('RestartCount', 0)} restart(s))",
                    docker.container_logs(spec.container, _LOG_TAIL),
                )
            next_look = now + _LOOK_EVERY_S
        ports.clock.sleep(0.5)
    reporter.event("listening", worker=spec.host.name, endpoint=f"{spec.address}:{spec.port}")


def remove_worker(spec: WorkerRemove, ports: Ports, reporter: Reporter) -> None:
    worker_docker(ports, spec.host).remove_container(spec.name)
    reporter.event("removed", worker=spec.host.name, container=spec.name)
    if spec.profile:  # forgotten only once removed: a failed removal is planned again next time
        forget_worker(ports.state, spec.profile, spec.host, spec.name)


def remove_worker_volume(spec: WorkerVolumeRemove, ports: Ports, reporter: Reporter) -> None:
    worker_docker(ports, spec.host).remove_volume(spec.name)
    reporter.event("removed", worker=spec.host.name, volume=spec.name)


def _entry(host: DockerHost, container: str) -> dict[str, str | None]:
    return {"name": host.name, "docker": host.url, "tls_dir": host.tls_dir, "container": container}


def _same(entry: dict[str, str | None], host: DockerHost, container: str) -> bool:
    return entry.get("docker") == host.url and entry.get("container") == container


def remember_workers(
    state: StatePort,
    profile: str,
    launched: tuple[tuple[DockerHost, str], ...],
    converged: bool = False,
    key: str | None = None,
) -> None:
    """Add (worker Docker, rpc-server container) pairs to the profile's record of launched workers (issue 18):
    a worker the profile later drops is found there and removed, not left listening on the network.
    `converged`: an apply converged to these workers, so an entry of the same container under another Docker
    URL is that same container seen by another URL (a dropped one was removed and forgotten before): it goes.
    `key`: another record of the same form (model/records.py cluster_members_key); the RPC workers' by default."""
    if not profile or not launched:
        return
    key = key or rpc_workers_key(profile)
    recorded = list((state.read(key) or {}).get("workers") or [])
    entries = recorded
    for host, container in launched:
        entries = [
            e for e in entries if not (_same(e, host, container) or (converged and e.get("container") == container))
        ]
        entries.append(_entry(host, container))
    if sorted(map(str, entries)) != sorted(map(str, recorded)):
        state.write(key, {"workers": entries})


def forget_worker(state: StatePort, profile: str, host: DockerHost, container: str, key: str | None = None) -> None:
    """Drop (Docker, container) from the profile's record (`key`: as remember_workers')."""
    key = key or rpc_workers_key(profile)
    entries = [e for e in (state.read(key) or {}).get("workers") or [] if not _same(e, host, container)]
    if entries:
        state.write(key, {"workers": entries})
    else:
        state.delete(key)
