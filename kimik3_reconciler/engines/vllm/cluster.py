"""A vLLM replica over several hosts, on Ray (vLLM's multi-node serving guide): the head host starts Ray's head
(`ray start --head`), every other node joins it (`ray start --address head:port`), and the one server, on the head,
runs its tensor × pipeline-parallel ranks as Ray actors across the nodes (`--distributed-executor-backend ray`).
Each node's processes are argv lists from the profile's values; nothing here runs or reaches a host."""

from __future__ import annotations

from typing import Any

from kimik3_reconciler.engines.base import MemberProcess, NodeLaunch

# Ray's default GCS port (`ray start --head`'s own default), the head's when vllm.cluster.port is null.
RAY_PORT = 6379
# No Ray process sends usage statistics (the nodes may have no way out, and a deployment tool should not phone home
# for them).
_RAY_COMMON = ("--disable-usage-stats",)
# A node's Ray blocks in the foreground: it is its container's main process, which exits when Ray does (the plan sees
# the member dead). The head's returns once Ray's head is up: the server follows it in the head's container
# (planning/cluster_render.py), that container's main process.
_NODE_ONLY = ("--block",)
# The head's dashboard is left off: it serves job submission, i.e. code execution, on its port. Ray 2.60 refuses the
# flag on a joining node ("should only be specified when starting head node"), seen in the Ray cluster test.
_HEAD_ONLY = ("--include-dashboard=false",)


def head_address(cluster: Any) -> str:
    """`host:port` of Ray's head: where the nodes join and the server connects (RAY_ADDRESS)."""
    return f"{cluster.bind}:{cluster.port or RAY_PORT}"


def ray_head(cluster: Any) -> tuple[str, ...]:
    return (
        "ray",
        "start",
        "--head",
        "--node-ip-address",
        cluster.bind,
        "--port",
        str(cluster.port or RAY_PORT),
        *_RAY_COMMON,
        *_HEAD_ONLY,
    )


def ray_worker(cluster: Any, node: Any) -> tuple[str, ...]:
    return (
        "ray",
        "start",
        "--address",
        head_address(cluster),
        "--node-ip-address",
        node.bind,
        *_RAY_COMMON,
        *_NODE_ONLY,
    )


def server_flags(cluster: Any) -> tuple[str, ...]:
    """What the server adds to run its ranks on the cluster's nodes."""
    return ("--distributed-executor-backend", "ray") if cluster is not None else ()


def server_env(cluster: Any) -> tuple[tuple[str, str], ...]:
    """The server joins the head's Ray (not a new local one) and tells vLLM the head's address (VLLM_HOST_IP: vLLM's
    guide sets it on every node so each rank reports the address the others reach)."""
    if cluster is None:
        return ()
    return (("RAY_ADDRESS", head_address(cluster)), ("VLLM_HOST_IP", cluster.bind))


def nodes(cluster: Any, server: tuple[str, ...]) -> tuple[NodeLaunch, ...]:
    """The head (Ray's head, then the server: `server`, its whole argv) and each node (a Ray worker), in rank order."""
    if cluster is None:
        return ()
    head = NodeLaunch(
        "head",
        0,
        None,
        cluster.bind,
        (MemberProcess("ray-head", ray_head(cluster)), MemberProcess("server", server)),
        (("VLLM_HOST_IP", cluster.bind),),
    )
    return (
        head,
        *(
            NodeLaunch(
                node.name,
                rank,
                node.docker,
                node.bind,
                (MemberProcess("ray-worker", ray_worker(cluster, node)),),
                (("VLLM_HOST_IP", node.bind),),
            )
            for rank, node in enumerate(cluster.nodes, start=1)
        ),
    )
