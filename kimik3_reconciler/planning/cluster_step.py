"""Plan a replica over several hosts (vllm.cluster / sglang.cluster, issue 41 item 4), modelled on the RPC workers
(planning/worker_step.py): each node is reached through its own Docker (`cluster.nodes[i].docker`), locked, observed
and planned with the head.

Before the head's container (`plan_cluster_nodes`): a node whose Docker cannot give the GPUs the head's request asks
for is refused (planning/node_gpus.py); on each node the profile's image (pulled by digest there when it
lacks it) and, where its member is launched, a check that it sees the checkpoint the head verified at the same path
(a short-lived container there). After the head's container (`plan_cluster_members`): each node's member container
(vLLM: `ray start --address HEAD --block`, which needs Ray's head up: the head's container starts it first; SGLang:
the server at the node's rank), then for vLLM a wait until Ray's node table shows every host; the health wait that
follows covers the server, which waits for its placement group (vLLM) or its peers (SGLang).

The replica is one unit: a member lost (its container gone, exited, or its raylet missing from Ray's table) replaces
the head's container (planning/container_step.py: vLLM's Ray executor does not survive a lost actor), and a head
that is (re)launched takes every node with it (their Ray belonged to the old head)."""

from __future__ import annotations

import json
from dataclasses import replace

from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.facts import MemberFact, Observed, RemovedWorkerFact
from kimik3_reconciler.model.labels import MEMBER_INPUTS
from kimik3_reconciler.model.plan import Action, DiffItem, Step, flat_diff
from kimik3_reconciler.model.records import cluster_members_key
from kimik3_reconciler.model.specs import (
    ContainerSpec,
    DockerHost,
    MemberCheckpoint,
    MemberImage,
    MemberLaunch,
    MemberRemove,
    MemberWait,
)
from kimik3_reconciler.planning.cluster_render import member_lost, node_field, rendered_members
from kimik3_reconciler.planning.container_step import container_alone, container_changes
from kimik3_reconciler.planning.desired import Desired
from kimik3_reconciler.planning.image_pull import pull_spec
from kimik3_reconciler.planning.launch import snapshot_path
from kimik3_reconciler.planning.node_gpus import node_request, refuse_node_gpus

# Ray's worker joins within seconds of its container's start; a node that takes longer is broken (or its image is
# still loading its Python on a busy host: generous).
MEMBER_WAIT_S = 300.0
# What the node's check container runs (the profile's image has Python: vLLM's and SGLang's both): the files under the
# mounted snapshot and their sizes, links followed (the HF cache's snapshot links into its blobs), as JSON.
CHECKPOINT_LIST = (
    "import json, os, sys\n"
    "root, found = sys.argv[1], {}\n"
    "for folder, _, names in os.walk(root, followlinks=True):\n"
    "    for name in names:\n"
    "        path = os.path.join(folder, name)\n"
    "        try:\n"
    "            found[os.path.relpath(path, root)] = os.stat(path).st_size\n"
    "        except OSError:\n"
    "            found[os.path.relpath(path, root)] = -1\n"
    "print(json.dumps(found))\n"
)


def _host(node) -> DockerHost:  # noqa: ANN001 - model.profile.ClusterNode
    return DockerHost(node.name, node.docker, node.tls_dir)


def _fact(observed: Observed, name: str, docker: str, field: str) -> MemberFact:
    """`field`: the profile's field of that node's Docker (cluster_render.node_field), named by a refusal."""
    found = next((m for m in observed.members if m.name == name), None)
    if found is None:
        raise PlanError(f"cluster node {name}: not observed (internal: observe every node of the profile)")
    if found.error:
        # Nothing is known about that host: planning it blind could start the head's server without its member.
        raise PlanError(f"cluster node {name} ({field}): cannot reach its Docker at {docker}: {found.error}")
    return found


def _head_relaunched(desired: Desired, observed: Observed, planned: tuple[Step, ...]) -> bool:
    return container_changes(planned or container_alone(desired, observed))


def _member_step(desired: Desired, observed: Observed, planned: tuple[Step, ...], rendered) -> Step:  # noqa: ANN001
    node, profile_node, spec, digest = rendered
    fact = _fact(observed, node.name, profile_node.docker, node_field(desired.profile, node.name))
    spec = replace(spec, gpu_request=node_request(spec, fact.gpus))  # the way its own Docker gives GPUs
    host, target = _host(profile_node), f"{node.name}: {spec.name}"
    found = fact.container
    lost = member_lost(node, fact, digest, observed.ray_alive)
    if found is None:
        return Step(
            "member",
            target,
            Action.CREATE,
            f"no member on {node.name}: launch it (rank {node.rank})",
            spec=MemberLaunch(host, spec),
        )
    if lost is not None:
        diff = flat_diff(found.inputs, dict(_inputs(spec))) if found.fingerprint != digest else ()
        return Step(
            "member",
            target,
            Action.REPLACE,
            f"{lost}: launch it again",
            diff=diff or (DiffItem("member", lost, "running"),),
            spec=MemberLaunch(host, spec, replace=True),
        )
    if _head_relaunched(desired, observed, planned):
        # rule: cluster-head-relaunch-takes-nodes
        # The head's Ray starts a new cluster: a node's raylet of the old one would never serve it.
        return Step(
            "member",
            target,
            Action.REPLACE,
            "the head is launched again (a new Ray head / rendezvous): the node joins it again",
            diff=(DiffItem("head", "running", "relaunched"),),
            spec=MemberLaunch(host, spec, replace=True),
        )
    alive = " and alive in Ray's node table" if observed.ray_alive is not None else ""
    return Step(
        "member",
        target,
        Action.NOOP,
        f"running on {node.name}{alive}, fingerprint {digest} matches",
        spec=MemberLaunch(host, spec),
    )


def _inputs(spec: ContainerSpec) -> dict[str, object]:
    return json.loads(dict(spec.labels)[MEMBER_INPUTS])


def _check_spec(desired: Desired, spec: ContainerSpec) -> ContainerSpec:
    """The short-lived container that lists the node's checkpoint: the member's image and model mount, no GPUs, no
    network (it reads files only)."""
    return ContainerSpec(
        name=f"{spec.name}-checkpoint",
        image=spec.image,
        entrypoint=("python3", "-c", CHECKPOINT_LIST),
        command=(snapshot_path(desired.launch.input.model),),
        env=(),
        mounts=spec.mounts,
        gpus="none",
        labels=(),
        network_mode="none",
        ipc_mode="private",
        restart_policy="no",
    )


def plan_cluster_nodes(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    """Per node, before the head's container: the image (by digest), then the checkpoint check where its member is
    launched."""
    steps: list[Step] = []
    members = rendered_members(desired.profile, desired.launch)
    relaunch = bool(members) and _head_relaunched(desired, observed, ())
    for node, profile_node, spec, digest in members:
        field = node_field(desired.profile, node.name)
        fact = _fact(observed, node.name, profile_node.docker, field)
        launched = relaunch or member_lost(node, fact, digest, observed.ray_alive) is not None
        running = fact.container is not None and fact.container.state == "running"
        if launched and not running:
            # rule: cluster-node-gpu-plumbing
            # A node's Docker that gives GPUs neither the head's way nor the other fails the member's launch after
            # the head's server was replaced. Not where a member runs there: its GPUs were given by that Docker
            # (`--gpus` through the toolkit's hook, which `docker info` does not show), and it is launched again
            # the same way.
            refuse_node_gpus(spec, fact, field)
        host, pull = _host(profile_node), pull_spec(desired.profile.image.ref)
        if fact.image_present:
            steps.append(
                Step(
                    "member image",
                    f"{node.name}: {pull.ref}",
                    Action.NOOP,
                    f"image {pull.digest[:19]}… present on {node.name}",
                    spec=MemberImage(host, pull),
                )
            )
        else:
            steps.append(
                Step(
                    "member image",
                    f"{node.name}: {pull.ref}",
                    Action.CREATE,
                    f"no image with digest {pull.digest[:19]}… on {node.name}: pull {pull.by_digest} there",
                    spec=MemberImage(host, pull),
                )
            )
        if launched:
            # rule: cluster-node-checkpoint
            # vLLM and SGLang load the weights from the same local path on every node: a node without them fails
            # its ranks' load minutes into the head's; found here, before anything is stopped.
            files = tuple((f.path, f.size) for f in observed.model.files)
            steps.append(
                Step(
                    "member checkpoint",
                    f"{node.name}: {snapshot_path(desired.launch.input.model)}",
                    Action.READ,
                    f"check that {node.name} sees the {len(files)} verified checkpoint files "
                    f"at {spec.mounts[0].source} (model.cache_dir, the same path on every node)",
                    spec=MemberCheckpoint(
                        host, _check_spec(desired, spec), snapshot_path(desired.launch.input.model), files
                    ),
                )
            )
    return tuple(steps)


def plan_cluster_members(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    """Per node, after the head's container: its member container; then (vLLM) a wait for Ray's node table."""
    members = rendered_members(desired.profile, desired.launch)
    if not members:
        return ()
    steps = [_member_step(desired, observed, planned, rendered) for rendered in members]
    if desired.profile.engine != "vllm":
        return tuple(steps)  # SGLang's ranks meet at --dist-init-addr: the health wait covers them
    addresses = tuple(n.bind for n in desired.launch.cluster)
    wait = MemberWait(desired.launch.spec.name, addresses, MEMBER_WAIT_S)
    target = f"Ray: {', '.join(addresses)}"
    if any(s.changes for s in steps) or container_changes(planned) or observed.ray_alive is None:
        why = f" (Ray's table unread: {observed.ray_error})" if observed.ray_error else ""
        return (
            *steps,
            Step(
                "members",
                target,
                Action.READ,
                f"wait until Ray's node table shows all {len(addresses)} hosts alive{why}",
                spec=wait,
            ),
        )
    return (
        *steps,
        Step("members", target, Action.NOOP, f"Ray's node table shows all {len(addresses)} hosts alive", spec=wait),
    )


def _removal(profile_name: str, fact: RemovedWorkerFact) -> Step:
    host, target = DockerHost(fact.name, fact.docker, fact.tls_dir), f"{fact.name}: {fact.container_name}"
    if fact.error:
        # rule: cluster-removed-node-removed
        # Its member may still run (vLLM's: a Ray worker rejoining the head's address at every restart): never
        # forget it silently.
        raise PlanError(
            f"cluster node {fact.name}: the profile no longer names this node, but its member {fact.container_name} "
            f"cannot be removed: cannot reach its Docker at {fact.docker}: {fact.error}\n  remove it by hand on that "
            f"host (`docker rm -f {fact.container_name}`), then delete its entry from the state record "
            f"{cluster_members_key(profile_name)}"
        )
    state = "gone already: forget it" if fact.container is None else f"{fact.container.state}: remove it"
    return Step(
        "member",
        target,
        Action.DELETE,
        f"{fact.name} is no longer in the cluster's nodes and its member is {state}",
        spec=MemberRemove(host, fact.container_name, profile_name),
    )


def plan_removed_members(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    """Members an apply launched on nodes the profile no longer names: removed after the health wait (the replica
    that served until the new one is healthy ran ranks there)."""
    return tuple(_removal(desired.profile.name, fact) for fact in observed.removed_members)


def plan_member_teardown(desired_profile, observed: Observed) -> tuple[Step, ...]:  # noqa: ANN001
    """destroy: remove each node's member container (its image stays, as the head's), and those of recorded nodes
    the profile no longer names."""
    steps = [_removal(desired_profile.name, fact) for fact in observed.removed_members]
    cluster = desired_profile.cluster
    if cluster is None:
        return tuple(steps)
    for node in cluster.nodes:
        name = node.container_name(desired_profile.name)
        fact = _fact(observed, node.name, node.docker, node_field(desired_profile, node.name))
        if fact.container is None:
            steps.append(Step("member", f"{node.name}: {name}", Action.NOOP, f"no member on {node.name}"))
        else:
            steps.append(
                Step(
                    "member",
                    f"{node.name}: {name}",
                    Action.DELETE,
                    f"member {fact.container.state} on {node.name}: remove it",
                    spec=MemberRemove(_host(node), name, desired_profile.name),
                )
            )
    return tuple(steps)
