"""A replica over several hosts (vllm.cluster / sglang.cluster) as containers: the head's (this host's serving
container, running what the engine renders for the head) and one member container per node, on that node's Docker.
Pure: from the launch input and the engine's `cluster_launch`.

The head runs Ray's head and then the server (vLLM) in ONE container, through a constant bash script that gets each
process's argv as positional arguments (never a shell string built from profile fields). A separate Ray-head
container was the other way: the server, a Ray driver, would then need the head container's /tmp/ray sockets and its
shared memory (the object store), i.e. a shared volume and IPC namespace between two containers, and a server restart
would keep a Ray cluster whose actors died with it. One container keeps Ray's head and its driver together: the
replica restarts as one (its nodes rejoin the new head: planning/cluster_step.py replaces them with it).

A node's container: the profile's image (by digest), host networking (Ray and torch.distributed pick ports of their
own), the node's GPUs, the model mounted read-only at the same path as on the head (vLLM and SGLang load the weights
from the same local path on every node), the server's environment with the node's own (VLLM_HOST_IP)."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

from kimik3_reconciler.engines.base import NodeLaunch
from kimik3_reconciler.model.facts import MemberFact, Observed
from kimik3_reconciler.model.hashing import fingerprint
from kimik3_reconciler.model.labels import MEMBER_FINGERPRINT, MEMBER_INPUTS, PROFILE_LABEL
from kimik3_reconciler.model.profile import Profile, node_gpus_of
from kimik3_reconciler.model.specs import ContainerSpec, DockerHost

if TYPE_CHECKING:  # planning/launch.py renders the head's container with this module
    from kimik3_reconciler.planning.launch import Launch

# `bash -c HEAD_SCRIPT kimik3-head N1 ARGV1… N2 ARGV2… -- LAST…`: runs each counted argv to its end in order (Ray's
# head: `ray start --head` returns once the head is up), then execs the last (the server: the container's main
# process, so the container exits, and the plan sees it, when the server does). Constant: every profile value
# reaches it as an argument, never as shell text.
HEAD_SCRIPT = 'set -e; while [ "$1" != "--" ]; do n=$1; shift; "${@:1:$n}"; shift "$n"; done; shift; exec "$@"'
HEAD_SCRIPT_NAME = "kimik3-head"


def node_hosts(profile: Profile) -> tuple[DockerHost, ...]:
    """Every node's Docker, in rank order: the hosts an apply locks besides its own."""
    cluster = profile.cluster
    return tuple(DockerHost(n.name, n.docker, n.tls_dir) for n in cluster.nodes) if cluster is not None else ()


def node_members(profile: Profile) -> tuple[tuple[DockerHost, str], ...]:
    """(each node's Docker, its member container's name), in rank order: what a converged apply records."""
    cluster = profile.cluster
    return tuple(zip(node_hosts(profile), (n.container_name(profile.name) for n in cluster.nodes))) if cluster else ()


def node_field(profile: Profile, name: str) -> str:
    """The profile's field of a node's Docker (`vllm.cluster.nodes[1].docker`): what a refusal of that host names."""
    cluster = profile.cluster
    index = next((i for i, n in enumerate(cluster.nodes) if n.name == name), 0) if cluster is not None else 0
    return f"{profile.engine}.cluster.nodes[{index}].docker"


def node_locks(profile: Profile) -> tuple[tuple[DockerHost, str], ...]:
    """(each node's Docker, its field), in rank order: the hosts an apply locks besides its own (locking.py)."""
    return tuple((host, node_field(profile, host.name)) for host in node_hosts(profile))


def head_container(spec: ContainerSpec, head: NodeLaunch) -> ContainerSpec:
    """The serving container as the head runs it: one process, the server itself (SGLang's rank 0: its argv is the
    container's already); several (vLLM: Ray's head, then the server), each in order through HEAD_SCRIPT."""
    if len(head.processes) < 2:
        return spec
    arguments: list[str] = []
    for process in head.processes[:-1]:
        arguments += [str(len(process.command)), *process.command]
    env = {**dict(spec.env), **dict(head.env)}
    return replace(
        spec,
        entrypoint=("bash", "-c", HEAD_SCRIPT, HEAD_SCRIPT_NAME),
        command=(*arguments, "--", *head.processes[-1].command),
        env=tuple(sorted(env.items())),
    )


def member_container(
    profile: Profile, head_spec: ContainerSpec, image_fp: str, node: NodeLaunch, gpus: str | tuple[str, ...]
) -> tuple[ContainerSpec, str]:
    """A node's member container (labels included) and its fingerprint. `head_spec`: the head's rendered container
    (its image, environment and model mount: the same on every node); `gpus`: the node's (model/profile.py `node_gpus_of`)."""
    (process,) = node.processes  # a node runs one process (vLLM: its Ray worker; SGLang: the server at its rank)
    env = {**dict(head_spec.env), **dict(node.env)}
    spec = ContainerSpec(
        name=f"{profile.name}-node-{node.name}",
        image=head_spec.image,
        entrypoint=process.command[:1],
        command=process.command[1:],
        env=tuple(sorted(env.items())),
        mounts=head_spec.mounts[:1],  # the model (planning/launch.py model_mount): read-only, at the head's path
        gpus=gpus,
        labels=(),
        network_mode="host",
        ipc_mode="host",  # as the head's: Ray's object store and NCCL use the host's shared memory
        restart_policy=head_spec.restart_policy,
        gpu_request=head_spec.gpu_request,
    )
    digest = fingerprint({"spec": asdict(replace(spec, gpu_request="")), "image": image_fp})
    inputs = {
        "node": node.name,
        "rank": node.rank,
        "bind": node.bind,
        "docker": node.docker,
        "argv": list(spec.command),
    }
    labels = ((PROFILE_LABEL, profile.name), (MEMBER_FINGERPRINT, digest), (MEMBER_INPUTS, json.dumps(inputs)))
    return replace(spec, labels=labels), digest


def rendered_members(profile: Profile, launch: Launch) -> tuple[tuple[NodeLaunch, Any, ContainerSpec, str], ...]:
    """(the engine's node launch, the profile's node, its member container, its fingerprint) per node, in rank
    order; `launch`: the head's (planning/launch.py Launch)."""
    cluster = profile.cluster
    if cluster is None or not launch.cluster:
        return ()
    by_name = {n.name: n for n in cluster.nodes}
    rendered = []
    for node in launch.cluster[1:]:  # the head is launch.spec itself
        spec, digest = member_container(
            profile, launch.spec, launch.input.image_fingerprint, node, node_gpus_of(profile, by_name[node.name])
        )
        rendered.append((node, by_name[node.name], spec, digest))
    return tuple(rendered)


def member_lost(node: NodeLaunch, fact: MemberFact, digest: str, ray_alive: tuple[str, ...] | None) -> str | None:
    """Why this node's member must be launched again (None: it is there as rendered and, where Ray's table was read,
    alive in it). `fact`: the node as observed through its Docker."""
    found = fact.container
    if found is None:
        return "no member container"
    if found.fingerprint != digest:
        return f"member inputs changed (fingerprint {found.fingerprint} → {digest})"
    if found.state != "running":
        code = f", exit code {found.exit_code}" if found.exit_code is not None else ""
        return f"member container {found.state}{code}"
    if ray_alive is not None and node.bind not in ray_alive:
        return f"{node.bind} has no live raylet in Ray's node table"
    return None


def members_lost(profile: Profile, launch: Launch, observed: Observed) -> tuple[tuple[str, str], ...]:
    """(node, why) for each node whose member must be launched again: the replica is short of it."""
    facts = {m.name: m for m in observed.members}
    lost = []
    for node, _, _, digest in rendered_members(profile, launch):
        fact = facts.get(node.name)
        if fact is None or fact.error:
            continue  # not observed / unreachable: the member planner refuses with the node named
        why = member_lost(node, fact, digest, observed.ray_alive)
        if why is not None:
            lost.append((node.name, why))
    return tuple(lost)
