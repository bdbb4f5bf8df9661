"""An SGLang replica over several hosts, with SGLang's own multi-node flags (its multi-node guide): every host runs
the same `sglang serve` with the node count (`--nnodes`), its rank (`--node-rank`: the head, this host, 0) and the
head's rendezvous address (`--dist-init-addr host:port`, torch.distributed's); rank 0 serves HTTP, the others run
their ranks' schedulers. Each node's argv is a list from the profile's values; nothing here runs or reaches a host."""

from __future__ import annotations

from typing import Any

from kimik3_reconciler.engines.base import MemberProcess, NodeLaunch

# The head's rendezvous port when sglang.cluster.port is null (the port SGLang's multi-node examples use).
DIST_INIT_PORT = 20000


def rank_flags(cluster: Any, rank: int) -> tuple[str, ...]:
    """What a host's server adds at `rank` (none without a cluster)."""
    if cluster is None:
        return ()
    return (
        "--nnodes",
        str(cluster.size),
        "--node-rank",
        str(rank),
        "--dist-init-addr",
        f"{cluster.bind}:{cluster.port or DIST_INIT_PORT}",
    )


def nodes(cluster: Any, server_at: Any) -> tuple[NodeLaunch, ...]:
    """Each host's server, in rank order; `server_at(rank)`: the server's whole argv at that rank."""
    if cluster is None:
        return ()
    hosts = (("head", None, cluster.bind), *((n.name, n.docker, n.bind) for n in cluster.nodes))
    return tuple(
        NodeLaunch(name, rank, docker, bind, (MemberProcess("server", server_at(rank)),))
        for rank, (name, docker, bind) in enumerate(hosts)
    )
