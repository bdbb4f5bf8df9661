"""The members of a replica over several hosts, as its cluster sees them: for vLLM, Ray's own node table.

pyinfra's split: `RAY_NODES` is what runs on the head (in its container: `docker exec`, or any process that reaches
Ray's head through RAY_ADDRESS), a constant argv with no profile value in it; `ray_alive` and `missing` are pure and
read its output. A node whose raylet is gone (its container stopped, its host down) shows in Ray's table as not
alive, so the replica is missing a member even while the head's server still answers /health for a while."""

from __future__ import annotations

import json
from collections.abc import Iterable

from kimik3_reconciler.engines.base import NodeLaunch

# ray.nodes() over the GCS (no dashboard needed: the head runs without one), as JSON on stdout's last line.
RAY_NODES: tuple[str, ...] = (
    "python3",
    "-c",
    "import json, ray; ray.init(logging_level='ERROR'); "
    "print(json.dumps([{'address': n['NodeManagerAddress'], 'alive': n['Alive']} for n in ray.nodes()]))",
)


def ray_alive(output: str) -> frozenset[str]:
    """The addresses with a live raylet, from RAY_NODES' output (its last line). Ray keeps a dead node's row (alive
    false) and a restarted node gets a new row: an address counts as alive when any of its rows is."""
    rows = json.loads(output.strip().splitlines()[-1])
    return frozenset(row["address"] for row in rows if row["alive"])


def missing(nodes: Iterable[NodeLaunch], alive: frozenset[str]) -> tuple[str, ...]:
    """The names of the hosts the replica was rendered with (the engine's cluster_launch) that have no live member."""
    return tuple(node.name for node in nodes if node.bind not in alive)
