"""A replica over several hosts on Kubernetes (vllm.cluster / sglang.cluster): one LeaderWorkerSet group of
1 + len(nodes) pods, the head the leader; PURE (values in, pod templates out).

What each pod runs is the engine's own rendering of the cluster (its `cluster_launch`: vLLM's Ray head and server,
a Ray worker per node; SGLang's server at each rank) with the addresses a pod has in place of the profile's. In
Kubernetes the members find each other through the LeaderWorkerSet, never through the profile's bind fields (those
are the hosts' addresses, which no pod has):
  cluster.bind, on the leader      -> its own pod IP, $(K3_POD_IP) (Ray's head `--node-ip-address`, RAY_ADDRESS,
                                      VLLM_HOST_IP; SGLang rank 0's `--dist-init-addr`)
  cluster.bind, on a worker        -> $(LWS_LEADER_ADDRESS), the leader's DNS name, which LWS sets in every pod of
                                      the group (Ray's `--address`, SGLang's `--dist-init-addr`)
  nodes[].bind                     -> the worker pod's own IP, $(K3_POD_IP)
  a node's rank (`--node-rank`)    -> $(LWS_WORKER_INDEX) (LWS: 0 the leader, 1.. the workers, in pod order)
  nodes[].docker, tls_dir, name    -> not used: the scheduler places the pods; cluster.port is kept
The profile's addresses are swapped for tokens no profile can hold (its own text's digest), the rendering is escaped
as every pod's is (a profile's `$(` reaches the program as written), and only then do the tokens become Kubernetes'
`$(NAME)`: nothing a profile writes is expanded.

vLLM's leader runs two processes, Ray's head and then the server: its container runs LEADER, a constant Python
launcher given both argv as positional arguments (`<head argv> -- <server argv>`), never a shell string."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kimik3_reconciler.engines import ServingEngine
from kimik3_reconciler.engines.base import NodeLaunch
from kimik3_reconciler.fleet.groups import cluster_of
from kimik3_reconciler.fleet.targets.kubernetes_objects import labels
from kimik3_reconciler.fleet.values import FleetHost
from kimik3_reconciler.model.launch_input import LaunchInput
from kimik3_reconciler.model.profile_rules import FieldPath

POD_IP_ENV = "K3_POD_IP"
# Set by LWS in every pod of a group, as its docs say (LWS_LEADER_ADDRESS, LWS_GROUP_SIZE; LWS_WORKER_INDEX since
# v0.6.0; the render is for v0.10.0): not seen set here, no LWS controller runs on this machine.
LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"
WORKER_INDEX = "$(LWS_WORKER_INDEX)"
POD_IP = f"$({POD_IP_ENV})"
# The leader of a Ray cluster: Ray's head (the argv before "--"), then, once every pod of the group has joined Ray
# (LWS_GROUP_SIZE live nodes: vLLM places its ranks on the nodes it finds at start), the server (the argv after it)
# exec'd as the container's main process: SIGTERM (the pod stopping, after the preStop drain) reaches it, and its
# exit ends the pod, so RecreateGroupOnPodRestart recreates the group. Ray's head may return once it is up (the
# head's rendering on hosts, s14-cluster-apply) or block (`--block`): either way its failure ends the pod. Words,
# never parsed by a shell. While it waits it is the container's PID 1, which the kernel spares a signal it has no
# handler for: SIGTERM ends it (exit 143), or a pod stopped before its workers joined would wait out its whole grace
# period (exec gives the server its own handlers back).
LEADER = """\
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
args = sys.argv[1:]
cut = args.index("--")
head, server = subprocess.Popen(args[:cut]), args[cut + 1:]
want = int(os.environ.get("LWS_GROUP_SIZE", "1"))
count = ["python3", "-c", "import ray; ray.init(logging_level='ERROR'); print(sum(n['Alive'] for n in ray.nodes()))"]
while True:
    if head.poll():
        sys.exit(head.returncode)
    seen = subprocess.run(count, capture_output=True, text=True).stdout.split()[-1:]
    if seen and seen[0].isdigit() and int(seen[0]) >= want:
        break
    print(f"kimik3 leader: waiting for {want} Ray nodes", file=sys.stderr, flush=True)
    time.sleep(5)
os.execvp(server[0], server)
"""
LEADER_PROGRAM = ("python3", "-c", LEADER)  # python -c: sys.argv[1:] are the words after it


class PodAddresses:
    """The tokens that stand for a pod's addresses while the engine renders, and their Kubernetes names after."""

    def __init__(self, profile_text: str) -> None:
        digest = hashlib.sha256(profile_text.encode()).hexdigest()[:24]
        self.pod_ip, self.leader = f"k3pod{digest}", f"k3leader{digest}"

    def value(self, value: LaunchInput, leader: bool) -> LaunchInput:
        """`value` with its cluster's addresses as a pod has them: on the leader the head is the pod itself; on a
        worker the head is the leader, the node the pod."""
        cluster = value.knobs.cluster
        head = self.pod_ip if leader else self.leader
        nodes = [n.model_copy(update={"bind": self.pod_ip}) for n in cluster.nodes]
        knobs = value.knobs.model_copy(update={"cluster": cluster.model_copy(update={"bind": head, "nodes": nodes})})
        return replace(value, knobs=knobs)

    def named(self, word: str) -> str:
        """An escaped word with the tokens as Kubernetes' $(NAME) (the only words it expands)."""
        return word.replace(self.pod_ip, POD_IP).replace(self.leader, LEADER_ADDRESS)


def pod_ip_env() -> dict[str, Any]:
    """$(K3_POD_IP): first in a container's env, so what follows may name it."""
    return {"name": POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}


def _named_env(entry: dict[str, Any], addresses: PodAddresses) -> dict[str, Any]:
    """An env entry of the server's (escaped already) with the tokens named; one from a reference as it is."""
    return {**entry, "value": addresses.named(entry["value"])} if "value" in entry else entry


def leader_server(
    server: dict[str, Any], head: NodeLaunch, addresses: PodAddresses, escaped: Callable[[str], str]
) -> dict[str, Any]:
    """The leader's server container as the engine renders the head: with Ray's head before it (vLLM), the constant
    launcher running both; else (SGLang) the server alone, rank 0."""
    env = [pod_ip_env(), *(_named_env(e, addresses) for e in server.get("env", ()))]
    roles = [p.role for p in head.processes]
    if roles == ["server"]:
        return {**server, "args": [addresses.named(a) for a in server["args"]], "env": env}
    ray_head, serve = head.processes
    words = [*ray_head.command, "--", *serve.command]
    out = {k: v for k, v in server.items() if k != "args"}
    return {**out, "command": list(LEADER_PROGRAM), "args": [addresses.named(escaped(w)) for w in words], "env": env}


def worker_containers(
    server: dict[str, Any], nodes: tuple[NodeLaunch, ...], addresses: PodAddresses, escaped: Callable[[str], str]
) -> list[dict[str, Any]]:
    """Each node's container (rank order) from the engine's rendering on a worker pod: a Ray worker (vLLM) or the
    server at the pod's rank (SGLang); the model mounted where the head's server names it (a rank loads its own
    share of the weights), no readiness probe and no serving port (only the leader serves)."""
    found = []
    for node in nodes:
        (process,) = node.processes
        argv = [addresses.named(escaped(w)) for w in process.command]
        if "--node-rank" in argv:  # the engine's own flag (its rules refuse it in serve.extra_args)
            argv[argv.index("--node-rank") + 1] = WORKER_INDEX
        env = [pod_ip_env(), *({"name": k, "value": addresses.named(escaped(v))} for k, v in node.env)]
        if process.role == "server":  # the server's own environment, the node's beside it
            env += [_named_env(e, addresses) for e in server.get("env", ())]
        container = {
            "name": process.role,
            "image": server["image"],
            "command": argv,
            "env": env,
            "volumeMounts": server["volumeMounts"],
        }
        found.append(container)
    return found


def node_gpus(host: FleetHost, share: int | None) -> list[int | None]:
    """nvidia.com/gpu of each node's pod: its `gpus` list's length, its share of the ranks for `all`, 0 for none."""
    cluster = cluster_of(host.profile)
    assert cluster is not None  # called for a cluster's group only
    return [0 if n.gpus == "none" else share if n.gpus == "all" else len(n.gpus) for n in cluster[1].nodes]


def worker_pod(fleet_name: str, container: dict[str, Any], leader_spec: dict[str, Any]) -> dict[str, Any]:
    """The worker template: its container, the leader's volumes and init container (each pod's node fills its cache
    where the cache is the node's own), the same grace period."""
    spec = {k: v for k, v in leader_spec.items() if k != "containers"}
    return {"metadata": {"labels": labels(fleet_name, "cluster-node")}, "spec": {**spec, "containers": [container]}}


def cluster_launch(
    engine: ServingEngine, value: LaunchInput, addresses: PodAddresses, snapshot: str, leader: bool
) -> tuple[NodeLaunch, ...]:
    """The engine's rendering of the cluster with the pod's addresses; `snapshot`: where the pod mounts the model."""
    return engine.cluster_launch(addresses.value(value, leader), snapshot)


@dataclass(frozen=True)
class GroupInput:
    """What a cluster's group is rendered from: the fleet's name, the head host, its engine, its launch input (on
    the pod's address, as kubernetes.py renders every server), the pod's addresses, the model's snapshot where the
    pods mount it; `escaped`: kubernetes.py's escape of a profile's `$(`."""

    fleet_name: str
    host: FleetHost
    engine: ServingEngine
    value: LaunchInput
    addresses: PodAddresses
    snapshot: str
    escaped: Callable[[str], str]


def cluster_group(
    given: GroupInput,
    leader: dict[str, Any],
    resources: Sequence[dict[str, Any]],
    refuse: Callable[[FieldPath, str], None],
) -> dict[str, Any]:
    """The LWS template of a replica over several hosts: the head's processes in the leader (`leader`: the server's
    pod as kubernetes.py renders it), a node's in each worker pod, every worker from one template; `resources`:
    each node pod's (rank order); `refuse`: a problem of the profile's field."""
    (server,) = leader["spec"]["containers"]
    head, *_ = cluster_launch(given.engine, given.value, given.addresses, given.snapshot, leader=True)
    _, *nodes = cluster_launch(given.engine, given.value, given.addresses, given.snapshot, leader=False)
    leader["spec"]["containers"] = [leader_server(server, head, given.addresses, given.escaped)]
    containers = worker_containers(server, tuple(nodes), given.addresses, given.escaped)
    for container, amounts in zip(containers, resources):
        container["resources"] = amounts
        if not amounts:
            del container["resources"]
    moved = next((i for i, c in enumerate(containers) if c != containers[0]), None)
    if moved is not None:
        # LWS makes every worker of a group from one template.
        refuse(
            (given.host.profile.engine, "cluster", "nodes", moved, "gpus"),
            f"node {nodes[moved].name}'s pod differs from node {nodes[0].name}'s (its gpus): a LeaderWorkerSet makes "
            "every worker of a group from one template",
        )
        return {}
    worker = worker_pod(given.fleet_name, containers[0], leader["spec"])
    return {"leader": leader, "worker": worker, "size": 1 + len(nodes)}
