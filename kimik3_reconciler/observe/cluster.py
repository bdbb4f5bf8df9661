"""The members of a replica over several hosts: each node's image, member container and GPU plumbing (`docker info`)
through its own Docker, and for vLLM Ray's own node table.

pyinfra's split: `RAY_NODES` is what runs on the head (in its container: `docker exec`, or any process that reaches
Ray's head through RAY_ADDRESS), a constant argv with no profile value in it; `ray_alive` and `missing` are pure and
read its output. A node whose raylet is gone (its container stopped, its host down) shows in Ray's table as not
alive, so the replica is missing a member even while the head's server still answers /health for a while."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from kimik3_reconciler.engines.base import NodeLaunch
from kimik3_reconciler.errors import Kimik3Error
from kimik3_reconciler.model.facts import ContainerFact, MemberFact, RemovedWorkerFact
from kimik3_reconciler.model.image_ref import pinned_image
from kimik3_reconciler.model.labels import MEMBER_FINGERPRINT, MEMBER_INPUTS
from kimik3_reconciler.model.profile import Profile, node_gpus_of
from kimik3_reconciler.model.records import cluster_members_key
from kimik3_reconciler.model.specs import DockerHost
from kimik3_reconciler.observe.docker_objects import parse_docker_gpus, parse_labelled_container
from kimik3_reconciler.observe.pulled_image import holds_digest
from kimik3_reconciler.observe.removed_remote import collect_removed
from kimik3_reconciler.ports import DockerPort, StatePort

# Ray's node table read from its GCS by a plain GCS client (RAY_ADDRESS: the head's, set in its container): no driver
# is started, so no job is registered (`ray.init()` added one to Ray's job table at every `plan`, `status` and
# reconcile pass) and the read takes ~1 s less. No dashboard is needed (the head runs without one, which `ray list
# nodes` would need). The client is Ray's own but not public API: a Ray without it falls back to `ray.nodes()` through
# a driver. JSON on stdout's last line.
RAY_READ_S = 15  # the whole read, in the container: a live GCS answers in 0.4-1.5 s (docs/operations.md)


def ray_nodes_argv(bound_s: int) -> tuple[str, ...]:
    """RAY_NODES with its bound: the kernel ends the read after `bound_s` (SIGALRM, its default action: a handler of
    Python's would wait for Ray's blocking C++ call). With the GCS down, the client's read took ~42 s and the driver's
    `ray.init()` never returned (over 10 minutes): each plan, status and reconcile pass waited that long, and the
    driver stayed behind in the head's container."""
    return (
        "python3",
        "-c",
        "import json, os, signal\n"
        "signal.signal(signal.SIGALRM, signal.SIG_DFL)\n"
        f"signal.alarm({int(bound_s)})\n"
        "try:\n"
        "    from ray._raylet import GcsClient\n"
        "    from ray.core.generated.gcs_pb2 import GcsNodeInfo\n"
        f"    table = GcsClient(address=os.environ['RAY_ADDRESS']).get_all_node_info(timeout={int(bound_s)}).values()\n"
        "    rows = [{'address': n.node_manager_address, 'alive': n.state == GcsNodeInfo.ALIVE} for n in table]\n"
        "except (ImportError, AttributeError, TypeError):\n"
        "    import ray\n"
        "    ray.init(logging_level='ERROR')\n"
        "    rows = [{'address': n['NodeManagerAddress'], 'alive': n['Alive']} for n in ray.nodes()]\n"
        "print(json.dumps(rows))\n",
    )


RAY_NODES: tuple[str, ...] = ray_nodes_argv(RAY_READ_S)


def ray_alive(output: str) -> frozenset[str]:
    """The addresses with a live raylet, from RAY_NODES' output (its last line). Ray keeps a dead node's row (alive
    false) and a restarted node gets a new row: an address counts as alive when any of its rows is."""
    lines = output.strip().splitlines()
    if not lines:
        # The script printed nothing: it failed (its traceback is on stderr, not read) or was ended at its bound.
        raise ValueError(f"Ray's node table unread: no answer from Ray's GCS within {RAY_READ_S} s, or the read failed")
    rows = json.loads(lines[-1])
    return frozenset(row["address"] for row in rows if row["alive"])


def missing(nodes: Iterable[NodeLaunch], alive: frozenset[str]) -> tuple[str, ...]:
    """The names of the hosts the replica was rendered with (the engine's cluster_launch) that have no live member."""
    return tuple(node.name for node in nodes if node.bind not in alive)


def collect_member(
    profile_name: str, node: Any, docker: DockerPort, image_ref: str, gpus: str | tuple[str, ...]
) -> MemberFact:
    """One node through its own Docker: the profile's image there (by digest), its member container and, where the
    node gets GPUs, how that Docker gives them (its member copies the head's GPU request: the planner checks that the
    node's Docker has what it needs). A Docker that does not answer is recorded, not raised: the planner refuses with
    the node named. `gpus`: the GPUs its member gets (model/profile.py `node_gpus_of`)."""
    fact = MemberFact(name=node.name, docker=node.docker)
    try:
        if gpus != "none":
            fact = fact.model_copy(update={"gpus": parse_docker_gpus(docker.info())})
        image = pinned_image(image_ref)
        present = holds_digest(image.by_digest, image.digest, docker.inspect_image(image.by_digest))
        fact = fact.model_copy(update={"image_present": present})
        inspect = docker.inspect_container(node.container_name(profile_name))
        if inspect is None:
            return fact
        container = parse_labelled_container(inspect, MEMBER_FINGERPRINT, MEMBER_INPUTS)
        return fact.model_copy(update={"container": container})
    except Kimik3Error as exc:
        return fact.model_copy(update={"error": str(exc)})


def collect_members(
    profile: Profile, worker_docker: Callable[[DockerHost], DockerPort] | None
) -> tuple[MemberFact, ...]:
    """The cluster's nodes, in rank order (none without a cluster)."""
    cluster = profile.cluster
    if cluster is None:
        return ()
    if worker_docker is None:
        raise Kimik3Error("the profile has cluster nodes but no way to reach their Docker was wired")
    return tuple(
        collect_member(
            profile.name,
            n,
            worker_docker(DockerHost(n.name, n.docker, n.tls_dir)),
            profile.image.ref,
            node_gpus_of(profile, n),
        )
        for n in cluster.nodes
    )


def collect_ray(
    profile: Profile, docker: DockerPort, head: ContainerFact | None
) -> tuple[tuple[str, ...] | None, str | None]:
    """(addresses with a live raylet, why unread): Ray's node table through the head's running container (vLLM's
    cluster only: SGLang's has no Ray). Not read while the head is not running: its members are replaced with it."""
    if profile.engine != "vllm" or profile.cluster is None or head is None or head.state != "running":
        return None, None
    try:
        return tuple(sorted(ray_alive(docker.exec_output(profile.name, list(RAY_NODES))))), None
    except (Kimik3Error, ValueError, KeyError, IndexError) as exc:  # Ray's head not up yet, or gone: the plan says so
        return None, str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else type(exc).__name__


def recorded_members(state: StatePort, profile_name: str) -> list[dict[str, str | None]]:
    """The members applies of this profile launched ({"name", "docker", "tls_dir", "container"} each)."""
    return list((state.read(cluster_members_key(profile_name)) or {}).get("workers") or [])


def dropped_member_entries(profile: Profile, recorded: list[dict[str, str | None]]) -> list[dict[str, str | None]]:
    """The recorded members whose (Docker, container) the profile's nodes no longer name (all of them once the profile
    has no cluster)."""
    cluster = profile.cluster
    named = {(n.docker, n.container_name(profile.name)) for n in cluster.nodes} if cluster is not None else set()
    return [e for e in recorded if (e.get("docker"), e.get("container")) not in named]


def dropped_node_hosts(profile: Profile, recorded: list[dict[str, str | None]]) -> tuple[DockerHost, ...]:
    """The Docker of each recorded member the profile no longer names: an apply removes it there, so it locks that
    host too (collect_removed_members finds the same entries)."""
    return tuple(
        DockerHost(str(e["name"]), str(e["docker"]), e.get("tls_dir"))
        for e in dropped_member_entries(profile, recorded)
    )


def collect_removed_members(
    profile: Profile, worker_docker: Callable[[DockerHost], DockerPort] | None, state: StatePort
) -> tuple[RemovedWorkerFact, ...]:
    """Recorded members of nodes the profile no longer names, each seen through its recorded Docker. A Docker that
    does not answer is recorded, not raised: the planner refuses with the node named."""
    cluster = profile.cluster
    nodes = cluster.nodes if cluster is not None else ()
    still_named = {n.container_name(profile.name): DockerHost(n.name, n.docker, n.tls_dir) for n in nodes}
    dropped = dropped_member_entries(profile, recorded_members(state, profile.name))
    return collect_removed(dropped, still_named, worker_docker, "no way to reach cluster nodes' Docker was wired")
