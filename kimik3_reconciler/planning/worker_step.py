"""Plan the RPC workers (issue 18): on each worker host, the image and an rpc-server container, healthy
before the main server starts; the main server's --rpc list and fingerprint follow the workers.

A worker is another host reached through its own Docker (`rpc.workers[i].docker`). It runs
`ggml-rpc-server` from the profile's image (same pin, same patches: one image serves both roles),
bound to the one address the profile names. The worker's container fingerprint is part of the main
server's, so a worker that changes replaces the main server too: llama-server keeps tensors in the
worker's memory and cannot reconnect to a new rpc-server.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import asdict, replace

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.engines.base import WorkerServer
from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.facts import ContainerFact, Observed, RemovedWorkerFact, WorkerFact
from kimik3_reconciler.model.hashing import fingerprint
from kimik3_reconciler.model.labels import PROFILE_LABEL, RPC_CACHE_MOUNT, WORKER_FINGERPRINT, WORKER_INPUTS
from kimik3_reconciler.model.plan import Action, DiffItem, Step, flat_diff
from kimik3_reconciler.model.profile import Profile, RpcWorker
from kimik3_reconciler.model.records import rpc_workers_key
from kimik3_reconciler.model.specs import (
    ContainerSpec,
    DockerHost,
    ImageBuild,
    Mount,
    WorkerImage,
    WorkerLaunch,
    WorkerRemove,
    WorkerVolumeRemove,
    WorkerWait,
    rpc_cache_volume,
)

WORKER_WAIT_S = 120.0  # rpc-server listens within a second; a worker that needs longer is broken


def worker_container_name(profile: Profile, worker: RpcWorker) -> str:
    return worker.container_name(profile.name)


def docker_host(worker: RpcWorker) -> DockerHost:
    return DockerHost(worker.name, worker.docker, worker.tls_dir)


def worker_hosts(profile: Profile) -> tuple[DockerHost, ...]:
    """Every worker's Docker, in profile order: the hosts an apply locks besides its own."""
    return tuple(docker_host(w) for w in profile.workers)


def dropped_worker_hosts(profile: Profile, recorded: list[dict[str, str | None]]) -> tuple[DockerHost, ...]:
    """The Docker of each recorded worker (model/records.py rpc_workers_key) the profile no longer names: an apply
    removes its rpc-server there, so it locks that host too (observe/workers.py finds the same entries)."""
    named = {(w.docker, w.container_name(profile.name)) for w in profile.workers}
    return recorded_worker_hosts([e for e in recorded if (e.get("docker"), e.get("container")) not in named])


def recorded_worker_hosts(recorded: list[dict[str, str | None]]) -> tuple[DockerHost, ...]:
    return tuple(DockerHost(str(e["name"]), str(e["docker"]), e.get("tls_dir")) for e in recorded)


def endpoint(worker: RpcWorker) -> str:
    """host:port as llama-server's --rpc takes it (IPv6 in brackets)."""
    return f"[{worker.bind}]:{worker.port}" if ":" in worker.bind else f"{worker.bind}:{worker.port}"


def rpc_endpoints(profile: Profile) -> tuple[str, ...]:
    return tuple(endpoint(w) for w in profile.workers)


def worker_inputs(profile: Profile, worker: RpcWorker, image_fp: str) -> dict[str, object]:
    """The worker's flat form (named as the profile names it), stamped as a label for replacement diffs."""
    return {
        **{f"rpc.workers.{worker.name}.{k}": v for k, v in worker.model_dump(mode="json").items()},
        "image.fingerprint": image_fp,
    }


def render_worker(profile: Profile, worker: RpcWorker, image_tag: str, image_fp: str) -> tuple[ContainerSpec, str]:
    """The worker's rpc-server container (labels included) and its fingerprint."""
    server = _server(profile)
    gpus = worker.gpus if isinstance(worker.gpus, str) else tuple(str(g) for g in worker.gpus)
    cache_mounts = (
        (Mount(worker.cache_dir, RPC_CACHE_MOUNT, read_only=False),) if worker.cache and worker.cache_dir else ()
    )
    volumes = (
        ((rpc_cache_volume(profile.name, worker.name), RPC_CACHE_MOUNT),)
        if worker.cache and not worker.cache_dir
        else ()
    )
    spec = ContainerSpec(
        name=worker_container_name(profile, worker),
        image=image_tag,
        command=server.argv(worker),
        env=server.env(RPC_CACHE_MOUNT) if worker.cache else (),
        mounts=cache_mounts,
        gpus=gpus,
        labels=(),
        # Host networking: rpc-server binds the worker host's own address, nothing is published.
        network_mode="host",
        ipc_mode="private",
        restart_policy="unless-stopped",
        entrypoint=server.entrypoint,
        volumes=volumes,
    )
    digest = fingerprint({"spec": asdict(replace(spec, gpu_request="")), "image": image_fp})
    labels = (
        (PROFILE_LABEL, profile.name),
        (WORKER_FINGERPRINT, digest),
        (WORKER_INPUTS, json.dumps(worker_inputs(profile, worker, image_fp), sort_keys=True)),
    )
    return replace(spec, labels=labels), digest


def worker_fingerprints(profile: Profile, image_tag: str, image_fp: str) -> tuple[str, ...]:
    """Every worker's fingerprint, in --rpc order: part of the main server's fingerprint."""
    return tuple(render_worker(profile, w, image_tag, image_fp)[1] for w in profile.workers)


def _started(container: ContainerFact | None) -> datetime.datetime | None:
    stamp = container.started_at if container else None
    if not stamp or stamp.startswith("0001-"):
        return None
    head, _, tail = stamp.rstrip("Z").partition(".")
    try:  # docker's RFC 3339 with nanoseconds, in UTC: Python reads microseconds
        return datetime.datetime.fromisoformat(head + ("." + tail[:6] if tail else "")).replace(tzinfo=datetime.UTC)
    except ValueError:
        return None


def restarted_workers(observed: Observed) -> tuple[str, ...]:
    """Workers whose rpc-server started after the main server: the tensors the server placed there are gone."""
    main = _started(observed.container) if observed.workers else None
    if main is None:
        return ()
    return tuple(w.name for w in observed.workers if w.container is not None and (_started(w.container) or main) > main)


def _fact(observed: Observed, worker: RpcWorker) -> WorkerFact:
    found = next((w for w in observed.workers if w.name == worker.name), None)
    if found is None:
        raise PlanError(f"rpc.workers {worker.name}: not observed (internal: observe every worker of the profile)")
    if found.error:
        # Nothing is known about that host: planning it blind could start the main server without it.
        raise PlanError(f"rpc.workers {worker.name}: cannot reach its Docker at {worker.docker}: {found.error}")
    return found


def _server(profile: Profile) -> WorkerServer:
    """The engine's worker process (rpc.workers is a field of the engines that have one: the rules refuse it
    elsewhere)."""
    server = engine_for(profile.engine).workers
    assert server is not None, f"engine {profile.engine} runs no workers"
    return server


def _image_step(build: ImageBuild, worker: RpcWorker, fact: WorkerFact, cost: str) -> Step | None:
    host, target = docker_host(worker), f"{worker.name}: {build.tag}"
    if fact.same_daemon:
        return None  # the main host's image step builds it in this very daemon
    if any(i.fingerprint == build.fingerprint and build.tag in i.tags for i in fact.images):
        return Step(
            "worker image",
            target,
            Action.NOOP,
            f"image present on {worker.name} (fingerprint {build.fingerprint})",
            spec=WorkerImage(host, build, 0),
        )
    kept = next((i for i in fact.images if i.fingerprint == build.fingerprint), None)
    if kept is not None:
        return Step(
            "worker image",
            target,
            Action.UPDATE,
            f"a kept build on {worker.name} has fingerprint {build.fingerprint}: tag it again",
            spec=WorkerImage(host, build, 0, retag_id=kept.id),
        )
    return Step(
        "worker image",
        target,
        Action.CREATE,
        f"no image with fingerprint {build.fingerprint} on {worker.name}: build it there from the same "
        f"source and patches (ships {fact.context_bytes} bytes)",
        spec=WorkerImage(host, build, fact.context_bytes),
        cost=cost,
    )


def _container_step(
    spec: ContainerSpec, digest: str, worker: RpcWorker, fact: WorkerFact, inputs: dict[str, object]
) -> Step:
    host, target = docker_host(worker), f"{worker.name}: {spec.name}"
    found = fact.container
    if found is None:
        return Step(
            "worker",
            target,
            Action.CREATE,
            f"no rpc-server on {worker.name}: launch it on {endpoint(worker)}",
            spec=WorkerLaunch(host, spec),
        )
    if found.fingerprint != digest:
        return Step(
            "worker",
            target,
            Action.REPLACE,
            f"worker inputs changed (fingerprint {found.fingerprint} → {digest})",
            diff=flat_diff(found.inputs, inputs),
            spec=WorkerLaunch(host, spec, replace=True),
        )
    if found.state != "running":
        return Step(
            "worker",
            target,
            Action.REPLACE,
            f"rpc-server on {worker.name} is {found.state}: launch it again",
            diff=(DiffItem("state", found.state, "running"),),
            spec=WorkerLaunch(host, spec, replace=True),
        )
    return Step(
        "worker",
        target,
        Action.NOOP,
        f"running on {worker.name}, fingerprint {digest} matches",
        spec=WorkerLaunch(host, spec),
    )


def plan_workers(desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:  # noqa: ANN001
    """Per worker host, in profile order: image, rpc-server container, then a wait for its port."""
    profile, build = desired.profile, desired.build
    steps: list[Step] = []
    for worker in profile.workers:
        fact = _fact(observed, worker)
        image = _image_step(build, worker, fact, _server(profile).build_cost)
        steps += [image] if image is not None else []
        spec, digest = render_worker(profile, worker, build.tag, build.fingerprint)
        container = _container_step(spec, digest, worker, fact, worker_inputs(profile, worker, build.fingerprint))
        steps.append(container)
        wait = WorkerWait(docker_host(worker), spec.name, worker.bind, worker.port, WORKER_WAIT_S)
        if container.changes or fact.port_open is False:
            # rule: rpc-workers-first
            # llama-server connects to every --rpc endpoint at start and fails without one: workers listen first.
            steps.append(
                Step(
                    "worker health",
                    f"{worker.name}: {endpoint(worker)}",
                    Action.READ,
                    f"wait until rpc-server accepts connections at {endpoint(worker)}",
                    spec=wait,
                )
            )
        else:
            steps.append(
                Step(
                    "worker health",
                    f"{worker.name}: {endpoint(worker)}",
                    Action.NOOP,
                    f"{endpoint(worker)} accepts connections",
                    spec=wait,
                )
            )
    return tuple(steps)


def _removal(profile: Profile, fact: RemovedWorkerFact) -> Step:
    host, target = DockerHost(fact.name, fact.docker, fact.tls_dir), f"{fact.name}: {fact.container_name}"
    if fact.error:
        # rule: rpc-removed-worker-removed
        # Its rpc-server may still listen, open to anyone on that network: never forget it silently.
        raise PlanError(
            f"rpc.workers {fact.name}: the profile no longer names this worker, but its rpc-server "
            f"{fact.container_name} cannot be removed: cannot reach its Docker at {fact.docker}: "
            f"{fact.error}\n  remove it by hand on that host (`docker rm -f {fact.container_name}`), "
            f"then delete its entry from the state record {rpc_workers_key(profile.name)}"
        )
    if fact.container is None:
        return Step(
            "worker",
            target,
            Action.DELETE,
            f"{fact.name} is no longer in rpc.workers and its rpc-server is gone already: forget it",
            spec=WorkerRemove(host, fact.container_name, profile.name),
        )
    return Step(
        "worker",
        target,
        Action.DELETE,
        f"{fact.name} is no longer in rpc.workers: remove its rpc-server "
        f"({fact.container.state}; a left RPC server listens open on the network)",
        spec=WorkerRemove(host, fact.container_name, profile.name),
    )


def plan_removed_workers(
    desired,
    observed: Observed,  # noqa: ANN001
    planned: tuple[Step, ...] = (),
) -> tuple[Step, ...]:
    """Workers an apply launched that the profile no longer names: their rpc-server is removed (after the main
    server's swap: the old server keeps its tensors there until the new one, without --rpc to it, serves). Its
    tensor-cache volume is kept and named in that step's line (apply prints the steps that change something): the
    worker is forgotten with its rpc-server, so no later run, destroy --model included, sees the volume again."""
    steps: list[Step] = []
    for fact in observed.removed_workers:
        step = _removal(desired.profile, fact)
        if fact.cache_volume:
            volume = rpc_cache_volume(desired.profile.name, fact.name)
            host = DockerHost(fact.name, fact.docker, fact.tls_dir)
            step = replace(
                step,
                reason=f"{step.reason}; its tensor cache {volume} is kept, and no later run names it (kimik3 forgets "
                f"{fact.name} with its rpc-server): {_by_hand(volume, host)}",
            )
        steps.append(step)
    return tuple(steps)


def plan_worker_teardown(profile: Profile, observed: Observed, model: bool = False) -> tuple[Step, ...]:
    """destroy: remove each worker's rpc-server container (its image stays), and those of recorded workers the profile
    no longer names; each one's tensor cache named, removed with `model` (`_tensor_cache`)."""
    steps: list[Step] = []
    for removed in observed.removed_workers:
        steps.append(_removal(profile, removed))
        if removed.cache_volume:
            host = DockerHost(removed.name, removed.docker, removed.tls_dir)
            steps.append(_tensor_cache(profile.name, removed.name, host, model, dropped=True))
    for worker in profile.workers:
        fact = next((w for w in observed.workers if w.name == worker.name), None)
        name = worker_container_name(profile, worker)
        if fact is not None and fact.error:
            # Nothing is removed blind (its rpc-server may listen open on the network); the way on is named.
            raise PlanError(
                f"rpc.workers {worker.name}: cannot reach its Docker at {worker.docker}: {fact.error}\n  destroy "
                f"removes nothing until it answers: bring that Docker back, or, for a host gone for good, drop "
                f"{worker.name} from rpc.workers and destroy again (its plan says what to clean up by hand)"
            )
        if fact is not None and fact.container is not None:
            steps.append(
                Step(
                    "worker",
                    f"{worker.name}: {name}",
                    Action.DELETE,
                    f"rpc-server {fact.container.state} on {worker.name}: remove it",
                    spec=WorkerRemove(docker_host(worker), name, profile.name),
                )
            )
        else:
            steps.append(Step("worker", f"{worker.name}: {name}", Action.NOOP, f"no rpc-server on {worker.name}"))
        if fact is not None and fact.cache_volume:
            steps.append(_tensor_cache(profile.name, worker.name, docker_host(worker), model))
        elif worker.cache and worker.cache_dir:
            # The worker host's own folder (as model.local_path is the user's file): kimik3 never removes it.
            steps.append(
                Step(
                    "worker",
                    f"{worker.name}: {worker.cache_dir}",
                    Action.NOOP,
                    "rpc.workers cache_dir is a folder of the worker's host: its tensor cache kept (kimik3 never "
                    "removes it)",
                )
            )
    return tuple(steps)


def _tensor_cache(profile: str, worker: str, host: DockerHost, remove: bool, dropped: bool = False) -> Step:
    """destroy's step for a worker's tensor-cache volume. It holds the model's weight tensors the rpc-server received
    (by hash), no user data: a copy of what the model cache holds, so it goes with it (`--model`), and a later apply
    sends the tensors again (the first load's transfer). Kept otherwise, and the plan says so and how to remove it.
    `dropped`: a worker the profile no longer names, forgotten with its container (the state record), so this is the
    last run that names its volume."""
    volume = rpc_cache_volume(profile, worker)
    if remove:
        return Step(
            "worker",
            f"{worker}: {volume}",
            Action.DELETE,
            "--model: remove its tensor cache (the model's tensors the rpc-server received)",
            spec=WorkerVolumeRemove(host, volume),
        )
    if dropped:
        reason = (
            f"kept: its tensor cache; kimik3 forgets {worker} with its rpc-server, no later run names it: pass --model "
            f"to remove it now, or {_by_hand(volume, host)}"
        )
    else:
        reason = (
            f"kept: its tensor cache, the model's tensors a reload reads instead of receiving them (pass --model to "
            f"remove, or {_by_hand(volume, host)})"
        )
    return Step("worker", f"{worker}: {volume}", Action.NOOP, reason)


def _by_hand(volume: str, host: DockerHost) -> str:
    return f"`docker volume rm {volume}` through {host.name}'s Docker ({host.url})"
