"""The fleet on Kubernetes: `kimik3 fleet render --target kubernetes` renders the manifests a GitOps repo commits;
PURE (a validated Fleet in, manifests as dicts out; nothing is read, nothing is applied).

One LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) holds the fleet's replicas: each of its groups is one replica, a
main server (the leader) and its llama.cpp RPC workers (size 1 where there are none). Its rolling update is the
fleet's rollout policy: `maxUnavailable` is rollout.max_unavailable; `partition` keeps every group but the canary's
on the old revision (LWS updates the groups whose index is at least the partition: the canary is the last group(s),
Kubernetes names groups by index, not by host); `--rollout all` (partition 0) promotes the rest. A group is
recreated whole when one of its pods restarts (RecreateGroupOnPodRestart: an RPC worker's tensors die with its
rpc-server, fleet/groups.py). The server's argv and env are the engine's own (engines/*/launch.py, through
planning/launch.render_container), its readiness probe is the path kimik3's health wait reads, and smg (the fleet's
router) finds the leaders through its Kubernetes service discovery.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import PurePosixPath
from typing import Any, Literal

from kimik3_reconciler.engines import ServingEngine, engine_for
from kimik3_reconciler.errors import InputError, PlanError, ProfileError, ProfileProblem
from kimik3_reconciler.fleet.effective import override_paths
from kimik3_reconciler.fleet.groups import cluster_of
from kimik3_reconciler.fleet.targets import kubernetes_cluster
from kimik3_reconciler.fleet.targets.kubernetes_cluster import PodAddresses
from kimik3_reconciler.fleet.targets.kubernetes_objects import (
    POD_BIND,
    SET_NAME_LABEL,
    Manifest,
    labels,
    router_selector,
)
from kimik3_reconciler.fleet.targets.kubernetes_router import router_manifests
from kimik3_reconciler.fleet.values import Fleet, FleetHost
from kimik3_reconciler.model.facts import HostFacts, LocalInputs, ModelFact, Observed, RemoteFile
from kimik3_reconciler.model.image_ref import pinned_image
from kimik3_reconciler.model.labels import API_KEY_MOUNT, MODELS_MOUNT, RPC_CACHE_MOUNT
from kimik3_reconciler.model.loaded_profile import line_for, render_path
from kimik3_reconciler.model.model_files import CHECKPOINT
from kimik3_reconciler.model.profile import Profile, RpcWorker, gpus_of
from kimik3_reconciler.model.profile_rules import FieldPath
from kimik3_reconciler.planning.launch import launch_input, render_container, repo_dir
from kimik3_reconciler.planning.worker_step import render_worker

LWS_API = "leaderworkerset.x-k8s.io/v1"
GPU_RESOURCE = "nvidia.com/gpu"
CACHE_MOUNT = "/cache"  # the cache volume, writable, in the download init container only
# The leader's own pod name (`<set>-<group>`): its workers are `<set>-<group>-<index>` in the set's headless Service.
LEADER_ENV = "K3_LEADER"
# LWS names each group's StatefulSet `<name>-<group>` and its pods `<name>-<group>-<worker>`: hostnames and label
# values (63 characters at most, a StatefulSet's revision-hash label 11 more than its name), with room for the indexes.
MAX_NAME = 40
Rollout = Literal["canary", "all"]


class _Refusals:
    """Problems of the fleet file's kubernetes section (or of what it renders), each at its line."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet, self.found = fleet, []

    def add(self, path: FieldPath, message: str) -> None:
        line = line_for(path, self.fleet.lines) or line_for(("kubernetes",), self.fleet.lines) or 1
        problem = ProfileProblem(self.fleet.source, line, render_path(path), message)
        if problem not in self.found:  # every host's template asks the same of the section: said once
            self.found.append(problem)

    def add_profile(self, host: FleetHost, path: FieldPath, message: str) -> None:
        """A problem of a profile field: at `host`'s override where one sets it, else at the fleet's `profile`."""
        if any(path[: len(o)] == o for o in override_paths(host.overrides)):
            self.add(("overrides", host.name, *path), message)
        else:
            self.add(("profile",), f"{render_path(path)}: {message} (the profile's, so every host's)")

    def raise_any(self) -> None:
        if self.found:
            raise ProfileError(self.found)


def render_kubernetes(fleet: Fleet, rollout: Rollout = "canary") -> tuple[Manifest, ...]:
    """The fleet's manifests: the LeaderWorkerSet, its NetworkPolicy, the router (ServiceAccount, Role,
    RoleBinding, Deployment, Service). `rollout`: canary (partition keeps all but the canary's groups on the old
    revision) or all (partition 0). ProfileError naming `file:line: kubernetes.<field>` when something is missing."""
    refusals = _Refusals(fleet)
    section = fleet.kubernetes
    if section is None:
        refusals.add(
            ("kubernetes",),
            "no kubernetes section: give at least kubernetes.cache (claim or host_path) and kubernetes.router.image "
            "(the Kubernetes target needs what no host tells it)",
        )
        refusals.raise_any()
    if fleet.router.policy == "slots" and fleet.router.policy_given:
        # kimik3's router (slots) runs on the controller beside smg; the Kubernetes render has smg alone (its
        # default there: cache_aware), so a fleet file that asks for slots by name is told, not silently changed.
        refusals.add(
            ("router", "policy"),
            "slots is kimik3's router, run by `fleet apply` on the controller; the Kubernetes target renders smg "
            "alone: leave router.policy out (cache_aware there) or name one of smg's",
        )
    if len(fleet.name) > MAX_NAME:
        # LWS names pods `<name>-<group>-<worker>`: each a hostname, a DNS label of 63 characters at most.
        refusals.add(("name",), f"{len(fleet.name)} characters: Kubernetes names pods after it; at most {MAX_NAME}")
    templates = {host.name: _group_template(fleet, host, refusals) for host in fleet.hosts}
    refusals.raise_any()
    first, *others = fleet.hosts
    for host in others:
        moved = _first_difference(templates[first.name], templates[host.name])
        if moved is not None:
            # A LeaderWorkerSet's groups are made from one template: hosts that differ in what reaches the pod
            # (gpus, workers, ...) are not replicas of one set.
            refusals.add(
                ("overrides", host.name),
                f"host {host.name}'s pod differs from host {first.name}'s at {moved}: every group of a "
                "LeaderWorkerSet is made from one template (of what hosts may set apart, only serve.host and "
                "model.cache_dir do not reach the pod: it binds its own address, the cache is kubernetes.cache)",
            )
    refusals.raise_any()
    lws = _leader_worker_set(fleet, templates[first.name], rollout)
    return (lws, _network_policy(fleet, first.profile), *router_manifests(fleet, first.profile))


# --- the group: leader (the server) and workers (rpc-server) ---------------------------------------------------------


def _escaped(word: str) -> str:
    """`word` as Kubernetes passes it on: it expands `$(NAME)` in args and env values, so a profile's `$(` is
    written `$$(` (Kubernetes' escape) and reaches the server as written."""
    return word.replace("$(", "$$(")


def _image(fleet: Fleet, profile: Profile, engine: ServingEngine, refusals: _Refusals) -> tuple[str, str] | None:
    """(reference, digest) of the serving image: the profile's pulled image by digest, or (a built image) the
    fleet file's kubernetes.image, the reference `kimik3 fleet apply --registry` pushed it under."""
    try:
        return _pinned(fleet.kubernetes, profile, engine, refusals)
    except PlanError as exc:  # a reference the digest pattern let through but no registry would take
        refusals.add(exc.fields[0] if exc.fields else ("kubernetes", "image"), str(exc).split(": ", 1)[-1])
        return None


def _pinned(section: Any, profile: Profile, engine: ServingEngine, refusals: _Refusals) -> tuple[str, str] | None:
    if engine.image_source.kind == "build":
        if section.image is None:
            refusals.add(
                ("kubernetes", "image"),
                f"engine {engine.name} builds its image on each host: Kubernetes pulls one, so name it by digest "
                "(the REGISTRY/kimik3/<profile name>@sha256:... that `kimik3 fleet apply --registry` pushed, or "
                "your own push of the built image)",
            )
            return None
        ref = pinned_image(section.image, "kubernetes.image")
        return ref.by_digest, ref.digest
    pulled = pinned_image(profile.image.ref)
    if section.image is not None and pinned_image(section.image, "kubernetes.image").digest != pulled.digest:
        # A mirror of the profile's image is fine; other bytes than the profile pins are not the fleet's.
        refusals.add(
            ("kubernetes", "image"),
            f"{section.image} is not the profile's image: its digest must be {pulled.digest} (image.ref)",
        )
        return None
    mirror = pinned_image(section.image, "kubernetes.image").by_digest if section.image else None
    return mirror or pulled.by_digest, pulled.digest


def _pod_observed(fleet: Fleet, profile: Profile) -> Observed:
    """The pod described as kimik3 observes a host, from what the fleet file says of it: its whole cores, the model's
    one file the server opens where the fleet file names it (only the hub's list knows it; a render reads no hub),
    the API key where the pod mounts it. GPUs are not observed: an engine sizes from the profile and its catalog, as
    a plan on a host whose GPUs it cannot read does (`kimik3 plan` on a node says more)."""
    section, model = fleet.kubernetes, profile.model
    named = (RemoteFile(path=section.model_file, size=0),) if section.model_file else ()
    return Observed(
        host=HostFacts(physical_cores=section.cpu or 1),
        inputs=LocalInputs(
            dockerfile_path="",
            dockerfile_sha256="",
            api_key_file=API_KEY_MOUNT if profile.serve.api_key_file else None,
        ),
        model=ModelFact(
            repo=model.repo,
            revision=model.revision,
            quant=model.quant or CHECKPOINT,
            cache_dir=CACHE_MOUNT,
            files=named,
        ),
    )


def _entry_named(fleet: Fleet, profile: Profile, engine: ServingEngine, refusals: _Refusals) -> bool:
    """Whether the server's entry into the snapshot is known: the snapshot folder itself, or (an engine that opens
    one file of it) the file kubernetes.model_file names, that engine's choice among the quant's files."""
    observed = _pod_observed(fleet, profile)
    unnamed = engine.model_entry(observed.model.model_copy(update={"files": ()}))
    if unnamed == ".":
        return True
    given = fleet.kubernetes.model_file
    if given is None:
        refusals.add(
            ("kubernetes", "model_file"),
            f"engine {engine.name} opens one file of the snapshot, which only the hub's file list names: give it, "
            f"relative to the snapshot ({profile.model.quant}/<name>-00001-of-000NN.<ext>; `kimik3 plan` on a host "
            "shows it)",
        )
        return False
    if ".." in PurePosixPath(given).parts or engine.model_entry(observed.model) != given:
        refusals.add(
            ("kubernetes", "model_file"),
            f"{given!r} is not a file engine {engine.name} opens for quant {profile.model.quant}: write "
            f"{profile.model.quant}/<first file>",
        )
        return False
    return True


def _gpu_count(gpus: Any, needs: int | None, field: FieldPath, fleet: Fleet, refusals: _Refusals) -> int:
    """nvidia.com/gpu of a pod: the profile's list's length, the engine's count (vLLM/SGLang: their tensor
    parallel size), else kubernetes.gpus."""
    given = fleet.kubernetes.gpus
    if gpus == "none":
        return 0
    count = len(gpus) if not isinstance(gpus, str) else needs
    if count is None:
        if given is None:
            refusals.add(
                ("kubernetes", "gpus"),
                f"{render_path(field)} is 'all', which a host counts and Kubernetes cannot: give kubernetes.gpus "
                "(nvidia.com/gpu per pod)",
            )
            return 0
        return given
    if given is not None and given != count:
        refusals.add(("kubernetes", "gpus"), f"{given} GPUs, but {render_path(field)} gives the pod {count}")
    return count


def _host_files(host: FleetHost, refusals: _Refusals) -> bool:
    """Whether the profile serves only what the cache volume holds: a host's own model file or draft is not there."""
    profile = host.profile
    before = len(refusals.found)
    for path, value, why in (
        (("model", "local_path"), profile.model.local_path, "a file of one host"),
        (("serve", "spec_draft"), profile.serve.spec_draft, "a draft file of one host"),
    ):
        if value is not None:
            # The pod sees the cache volume only: a host's own file is not there.
            refusals.add_profile(
                host, path, f"{why}: the Kubernetes target mounts the model cache only (kubernetes.cache)"
            )
    return len(refusals.found) == before


def _group_template(fleet: Fleet, host: FleetHost, refusals: _Refusals) -> dict[str, Any]:
    """The LWS template of `host`'s replica: the leader pod (its server) and the worker pod (rpc-server)."""
    before = len(refusals.found)
    profile = host.profile
    engine = engine_for(profile.engine)
    image = _image(fleet, profile, engine, refusals)
    named = _entry_named(fleet, profile, engine, refusals)
    if len(refusals.found) > before or image is None or not named or not _host_files(host, refusals):
        return {}
    section = fleet.kubernetes
    if section.cpu is None and engine.owned_flags(1, "none") != engine.owned_flags(2, "none"):
        # The engine's fixed flags take the server's physical cores (llama.cpp's --threads, seed 000): a pod has the
        # cores it asks for, so they must be named.
        refusals.add(
            ("kubernetes", "cpu"),
            f"engine {engine.name}'s fixed flags take the server's physical cores (seed 000): give the pod's whole "
            "cores in kubernetes.cpu (requests = limits, so the static CPU manager pins them)",
        )
        return {}
    needs = engine.host_needs(profile)
    # One pod's share of the replica's ranks, one GPU each: all of them on one host, a host's share in a cluster.
    share = needs.gpus * needs.pipeline // needs.hosts if needs else None
    gpus = _gpu_count(gpus_of(profile), share, ("gpus",), fleet, refusals)
    workers = profile.workers
    observed = _pod_observed(fleet, profile)
    try:
        # The engine's own plan on the pod's observation: what a host whose GPUs it cannot read would get.
        value, _ = launch_input(profile, observed, image[0], image[1], engine, engine.render_plan(profile, observed))
    except (PlanError, InputError) as exc:  # what a plan on a host would refuse of the profile, said as the profile's
        refusals.add_profile(host, exc.fields[0] if exc.fields else ("profile",), str(exc))
        return {}
    value = replace(
        value,
        bind=POD_BIND,
        # The port the profile serves on: no latency proxy runs in the pod to take it (metrics: is not rendered).
        serve=value.serve.model_copy(update={"port": profile.serve.port}),
        # Each worker is the pod `<leader>-<index>` of the set's headless Service (LWS names them so).
        rpc=tuple(f"$({LEADER_ENV})-{i}.{fleet.name}:{w.port}" for i, w in enumerate(workers, start=1)),
    )
    # A cluster's members meet at the pods' addresses (kubernetes_cluster.py), not at the profile's hosts'.
    addresses = PodAddresses(host.profile_text) if cluster_of(profile) is not None else None
    spec = render_container(addresses.value(value, leader=True) if addresses else value, engine)
    argv = [_escaped(a) for a in spec.command]
    if workers:  # --rpc's $(K3_LEADER) is kimik3's own, for Kubernetes to expand: the one word not escaped
        argv[argv.index("--rpc") + 1] = ",".join(value.rpc)
    port = profile.serve.port
    env = [{"name": k, "value": _escaped(v)} for k, v in spec.env]
    if workers:  # the leader's own pod name, which its workers' names extend
        env.insert(0, {"name": LEADER_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    server: dict[str, Any] = {
        "name": "server",
        "image": spec.image,
        **({"command": list(spec.entrypoint)} if spec.entrypoint else {}),
        "args": argv,
        **({"env": env} if env else {}),
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        # The path kimik3's health wait reads (the engine's readiness): the router sends nothing before it answers.
        # No liveness probe: a load of minutes would fail it and be killed; the kubelet restarts a server that exits.
        "readinessProbe": {
            "httpGet": {"path": engine.readiness.path, "port": "http"},
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
        "resources": _resources(section.cpu, section.memory, gpus),
        "volumeMounts": [_model_mount(profile)],
        "lifecycle": {"preStop": {"sleep": {"seconds": _drain_s(fleet)}}},
    }
    volumes = [_cache_volume(section)]
    if profile.serve.api_key_file:
        secret = section.secrets.api_key
        if secret is None:
            refusals.add(
                ("kubernetes", "secrets", "api_key"),
                "the profile's server takes an API key (serve.api_key_file): name the Secret that holds it "
                "(kubernetes.secrets.api_key: {name, key}); its value is never written in a manifest",
            )
            return {}
        # The key reaches the server as the file --api-key-file reads, from the Secret: never in argv or env.
        volumes.append({"name": "api-key", "secret": {"secretName": secret.name, "defaultMode": 0o400}})
        server["volumeMounts"].append({"name": "api-key", "mountPath": API_KEY_MOUNT, "subPath": secret.key})
    if gpus:
        # Docker ran the server with the host's IPC (NCCL's shared memory): a pod gets a memory-backed /dev/shm.
        volumes.append({"name": "shm", "emptyDir": {"medium": "Memory"}})
        server["volumeMounts"].append({"name": "shm", "mountPath": "/dev/shm"})
    leader = {
        "metadata": {"labels": labels(fleet.name, "server")},
        "spec": {
            "terminationGracePeriodSeconds": _drain_s(fleet) + 30,
            **({"initContainers": [_download(fleet, profile)]} if section.download else {}),
            "containers": [server],
            "volumes": volumes,
        },
    }
    if addresses is not None:
        return kubernetes_cluster.cluster_group(
            kubernetes_cluster.GroupInput(fleet.name, host, engine, value, addresses, _snapshot(profile), _escaped),
            leader,
            [_resources(section.cpu, section.memory, n or 0) for n in kubernetes_cluster.node_gpus(host, share)],
            lambda path, message: refusals.add_profile(host, path, message),
        )
    worker = _worker_pod(fleet, host, image, refusals) if workers else None
    return {"leader": leader, "worker": worker, "size": 1 + len(workers)}


def _drain_s(fleet: Fleet) -> int:
    """rollout.drain_timeout in whole seconds: how long a pod told to stop keeps serving what it has in flight."""
    return max(1, round(fleet.rollout.drain_timeout_s))


def _resources(cpu: int | None, memory: str | None, gpus: int) -> dict[str, Any]:
    amounts: dict[str, Any] = {}
    if cpu is not None:
        amounts["cpu"] = str(cpu)
    if memory is not None:
        amounts["memory"] = memory
    if gpus:
        amounts[GPU_RESOURCE] = str(gpus)
    # requests = limits: whole cores pinned (Guaranteed QoS); GPUs are only ever asked for as limits = requests.
    return {"requests": dict(amounts), "limits": dict(amounts)} if amounts else {}


def _model_folder(profile: Profile) -> str:
    return PurePosixPath(repo_dir(CACHE_MOUNT, profile.model.repo)).name


def _model_mount(profile: Profile) -> dict[str, Any]:
    """The model's folder of the cache, read-only, where the server's argv names it (as on a host)."""
    folder = _model_folder(profile)
    return {"name": "model-cache", "mountPath": f"{MODELS_MOUNT}/{folder}", "subPath": folder, "readOnly": True}


def _snapshot(profile: Profile) -> str:
    """The pinned snapshot in the pod, where `_model_mount` puts the model's folder (the path a host's server reads)."""
    return f"{_model_mount(profile)['mountPath']}/snapshots/{profile.model.revision}"


def _cache_volume(section: Any) -> dict[str, Any]:
    if section.cache.claim is not None:
        return {"name": "model-cache", "persistentVolumeClaim": {"claimName": section.cache.claim}}
    return {"name": "model-cache", "hostPath": {"path": section.cache.host_path, "type": "DirectoryOrCreate"}}


def _download(fleet: Fleet, profile: Profile) -> dict[str, Any]:
    """The init container that fills the cache with the pinned revision (what `kimik3 apply` downloads on a host;
    kimik3's own per-file sha256 check does not run in it). The Hub token, where one is named, from its Secret."""
    model = profile.model
    argv = ["hf", "download", model.repo, "--revision", model.revision, "--cache-dir", CACHE_MOUNT]
    if model.quant is not None:  # one quant's folder of the repo, not every quant in it
        argv += ["--include", f"{model.quant}/*"]
    env = [{"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"}]
    if model.endpoint:
        env.append({"name": "HF_ENDPOINT", "value": _escaped(model.endpoint)})
    token = fleet.kubernetes.secrets.hf_token
    if token is not None:
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": token.name, "key": token.key}}})
    return {
        "name": "model-download",
        "image": fleet.kubernetes.download.image,
        "command": [_escaped(a) for a in argv],
        "env": env,
        "volumeMounts": [{"name": "model-cache", "mountPath": CACHE_MOUNT}],
    }


def _worker_container(
    worker: RpcWorker, image: tuple[str, str], host: FleetHost, refusals: _Refusals, index: int
) -> dict:
    """One worker's rpc-server as planning/worker_step renders it on a host, bound to the pod's address."""
    spec, _ = render_worker(host.profile, worker, image[0], image[1])
    argv = list(spec.command)
    argv[argv.index("-H") + 1] = POD_BIND
    if worker.gpus == "all":
        # kubernetes.gpus is the server pod's: a worker's count is its own list's length.
        refusals.add_profile(
            host,
            ("rpc", "workers", index, "gpus"),
            "'all' is counted on the worker's host, which Kubernetes does not have: list the worker's GPUs "
            "(their number is the worker pod's nvidia.com/gpu)",
        )
    gpus = 0 if isinstance(worker.gpus, str) else len(worker.gpus)
    container: dict[str, Any] = {
        "name": "rpc-server",
        "image": spec.image,
        **({"command": list(spec.entrypoint)} if spec.entrypoint else {}),
        "args": argv,
        "ports": [{"name": "rpc", "containerPort": worker.port, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": "rpc"}, "periodSeconds": 5},
        "resources": _resources(worker.threads, None, gpus),
    }
    if spec.env:
        container["env"] = [{"name": k, "value": v} for k, v in spec.env]
    if spec.volumes or spec.mounts:
        # Its tensor cache (a Docker volume or a folder of the worker's host there): the pod's own, for its life.
        container["volumeMounts"] = [{"name": "rpc-cache", "mountPath": RPC_CACHE_MOUNT}]
    return container


def _worker_pod(fleet: Fleet, host: FleetHost, image: tuple[str, str], refusals: _Refusals) -> dict[str, Any] | None:
    profile = host.profile
    containers = [_worker_container(w, image, host, refusals, i) for i, w in enumerate(profile.workers)]
    if any(c != containers[0] for c in containers[1:]):
        # LWS makes every worker of a group from one template.
        index = next(i for i, c in enumerate(containers) if c != containers[0])
        refusals.add_profile(
            host,
            ("rpc", "workers", index),
            f"worker {profile.workers[index].name} differs from worker {profile.workers[0].name} in port, threads, "
            "devices, gpus or cache: a LeaderWorkerSet makes every worker of a group from one template",
        )
        return None
    spec: dict[str, Any] = {"containers": [containers[0]]}
    if "volumeMounts" in containers[0]:
        spec["volumes"] = [{"name": "rpc-cache", "emptyDir": {}}]
    return {"metadata": {"labels": labels(fleet.name, "rpc-worker")}, "spec": spec}


def _first_difference(a: Any, b: Any, where: str = "") -> str | None:
    """The first JSON path at which `a` and `b` differ, or None."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{where}.{key}".lstrip(".")
            found = _first_difference(a[key], b[key], f"{where}.{key}")
            if found is not None:
                return found.lstrip(".")
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return next((f for i, (x, y) in enumerate(zip(a, b)) if (f := _first_difference(x, y, f"{where}[{i}]"))), None)
    return None if a == b else (where.lstrip(".") or "(the template)")


def _leader_worker_set(fleet: Fleet, template: dict[str, Any], rollout: Rollout) -> Manifest:
    policy = fleet.rollout
    replicas = len(policy.hosts)
    # LWS updates the groups at or above the partition: keeping the first `replicas - canary` leaves the canary's.
    partition = replicas - len(policy.canary) if rollout == "canary" else 0
    group: dict[str, Any] = {
        "size": template["size"],
        "restartPolicy": "RecreateGroupOnPodRestart",
    }
    if template["worker"] is not None:
        group["leaderTemplate"] = template["leader"]
        group["workerTemplate"] = template["worker"]
    else:
        group["workerTemplate"] = template["leader"]  # size 1: LWS makes the leader from the worker template
    body = {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": fleet.name,
            "namespace": fleet.kubernetes.namespace,
            "labels": labels(fleet.name, "server"),
        },
        "spec": {
            "replicas": replicas,
            # The leader is created with its workers, not after it is ready: llama-server loads its layers onto
            # the workers' rpc-servers, so it cannot be ready before they run (LeaderReady would never start them).
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {
                    "maxUnavailable": policy.max_unavailable,
                    "maxSurge": fleet.kubernetes.max_surge,
                    "partition": partition,
                },
            },
            "leaderWorkerTemplate": group,
        },
    }
    return Manifest("LeaderWorkerSet", fleet.name, body)


def _network_policy(fleet: Fleet, profile: Profile) -> Manifest:
    """The servers listen on their pod's address: only the router (on the serving port) and the pods of the same
    set (RPC between a leader and its workers) may connect; a loopback bind on a host means the same."""
    name = f"{fleet.name}-server"
    body = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": fleet.kubernetes.namespace, "labels": labels(fleet.name, "server")},
        "spec": {
            "podSelector": {"matchLabels": {SET_NAME_LABEL: fleet.name}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"podSelector": {"matchLabels": router_selector(fleet.name)}}],
                    "ports": [{"protocol": "TCP", "port": profile.serve.port}],
                },
                {"from": [{"podSelector": {"matchLabels": {SET_NAME_LABEL: fleet.name}}}]},
            ],
        },
    }
    return Manifest("NetworkPolicy", name, body)
