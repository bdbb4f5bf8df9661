"""Rules about a replica that spans hosts (`vllm.cluster`, `sglang.cluster`): private addresses unless the profile
says otherwise, each host once, and parallel sizes that give every node the same number of ranks. The engine's
rules module calls `members` with its section's name and its parallel sizes (one rule, two engines)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from urllib.parse import urlsplit

from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_rules.finding import Finding, error

# Ray (the head's GCS, its raylets) and torch.distributed's rendezvous (SGLang's --dist-init-addr) take commands from
# whoever reaches their ports: quoted in every refusal of an address.
NO_AUTH = (
    "Ray and torch.distributed have no authentication: whoever reaches these ports runs code on every node "
    "(Ray's docs: run clusters on a trusted network only)"
)
_CGNAT = ipaddress.ip_network("100.64.0.0/10")  # Tailscale's tailnet addresses: private to the tailnet


def private(address: ipaddress.IPv4Address) -> bool:
    """Loopback, RFC 1918 or a tailnet address: reachable only on a network the operator runs."""
    return address.is_loopback or address.is_private or address in _CGNAT


def _host_of(docker: str) -> str:
    return (urlsplit(docker).hostname or "").lower()


def _addresses(p: Profile, section: str) -> Iterator[tuple[tuple[str | int, ...], str]]:
    cluster = getattr(p, section).cluster
    yield (section, "cluster", "bind"), cluster.bind
    for i, node in enumerate(cluster.nodes):
        yield (section, "cluster", "nodes", i, "bind"), node.bind


def members(
    p: Profile, section: str, sizes: tuple[tuple[str, int | None], ...], pipeline_flags: tuple[str, ...]
) -> Iterator[Finding]:
    """`section`: the engine's section holding `cluster`; `sizes`: its parallel sizes as (field, value or None for
    the engine's 1), whose product is the replica's ranks (GPUs), the pipeline's last; `pipeline_flags`: the
    engine's flags for that last size."""
    cluster = getattr(p, section).cluster
    pipeline = sizes[-1]
    if pipeline[1] is not None or cluster is not None:
        for i, arg in enumerate(p.serve.extra_args):
            flag = arg.split("=", 1)[0]
            if flag in pipeline_flags:
                # rule: cluster-ranks
                # A pipeline size in extra_args still works on one host (as before the field); beside the field or a
                # cluster it is a second size, and argparse takes the last: not the ranks the plan split over hosts.
                yield error(
                    ("serve", "extra_args", i),
                    f"{flag} is rendered by kimik3 from {section}.{pipeline[0]} when it or {section}.cluster is set: "
                    "use that field",
                )
    if cluster is None:
        return
    for where, bind in _addresses(p, section):
        address = ipaddress.ip_address(bind)
        if address.is_unspecified:
            # rule: cluster-bind-private
            # The address is where the other members connect: every interface is no address to connect to, and it
            # opens the cluster's ports on every network.
            yield error(
                where,
                f"{bind} is every interface, not an address the other nodes can reach: name this "
                f"host's loopback or private address; {NO_AUTH}",
            )
        elif not private(address) and not cluster.allow_public:
            # rule: cluster-bind-private
            # A public address puts an unauthenticated cluster on the internet: only where the profile says so.
            yield error(
                where,
                f"{bind} is a public address: use a private one (10/8, 172.16/12, 192.168/16, "
                f"100.64/10), or write {section}.cluster.allow_public: true; {NO_AUTH}",
            )
    seen_bind: dict[str, str] = {cluster.bind: "the head (this host)"}
    seen_docker: dict[str, str] = {}
    seen_name: set[str] = set()
    for i, node in enumerate(cluster.nodes):
        where = (section, "cluster", "nodes", i)
        if node.bind in seen_bind:
            # rule: cluster-hosts-once
            # One host twice would run two members on one address (Ray: one raylet; SGLang: two ranks' ports) and
            # count its GPUs twice.
            yield error((*where, "bind"), f"{node.bind} is already {seen_bind[node.bind]}: list each host once")
        seen_bind.setdefault(node.bind, f"node {node.name}")
        host = _host_of(node.docker)
        if host in seen_docker:
            # rule: cluster-hosts-once
            # Two nodes through one Docker are one host: their containers would share its GPUs.
            yield error((*where, "docker"), f"{host} is already node {seen_docker[host]}'s Docker: list each host once")
        seen_docker.setdefault(host, node.name)
        if node.name in seen_name:
            # rule: cluster-hosts-once
            # The name is the node's container name on its host and its key in plans.
            yield error((*where, "name"), f"node {node.name!r} is listed twice")
        seen_name.add(node.name)
        if node.docker.startswith("tcp://") and node.tls_dir is None:
            # rule: cluster-hosts-once
            # A plain tcp:// Docker socket is root on that host for anyone who can reach it.
            yield error((*where, "tls_dir"), "a tcp:// Docker needs TLS: give tls_dir, or use ssh://user@host")
    yield from _ranks(p, section, sizes)


def _ranks(p: Profile, section: str, sizes: tuple[tuple[str, int | None], ...]) -> Iterator[Finding]:
    cluster = getattr(p, section).cluster
    ranks = 1
    for _, value in sizes:
        ranks *= value or 1
    named = " × ".join(f"{section}.{field} {value or 1}" for field, value in sizes)
    # The size a person sets for nodes: the pipeline's when written, else the tensor-parallel one.
    field = next((f for f, v in reversed(sizes) if v is not None), sizes[0][0])
    if ranks % cluster.size:
        # rule: cluster-ranks
        # Ray's placement and SGLang's --nnodes split the ranks evenly over the nodes (one GPU each): a remainder
        # leaves a node short or a rank without a GPU, found at start after every node pulled the image.
        yield error(
            (section, field),
            f"{named} = {ranks} ranks over {cluster.size} nodes (this host and {len(cluster.nodes)} in "
            f"{section}.cluster.nodes): the ranks must be a multiple of the nodes, each node runs the same share",
        )
        return
    per_node = ranks // cluster.size
    for i, node in enumerate(cluster.nodes):
        if isinstance(node.gpus, list) and per_node > len(node.gpus):
            # rule: cluster-ranks
            # One rank per GPU: a node with fewer GPUs than its share never starts its ranks.
            yield error(
                (section, "cluster", "nodes", i, "gpus"),
                f"lists {len(node.gpus)} GPUs, but {ranks} ranks over {cluster.size} nodes put {per_node} on each",
            )
