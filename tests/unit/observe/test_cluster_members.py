"""observe/cluster.py reads Ray's node table (RAY_NODES' output, in the shape Ray 2.60 printed it in
tests/integration/test_ray_cluster.py) into the replica's missing members."""

from __future__ import annotations

from kimik3_reconciler.engines.base import NodeLaunch
from kimik3_reconciler.observe.cluster import missing, ray_alive

NODES = (
    NodeLaunch("head", 0, None, "10.0.0.1", ()),
    NodeLaunch("gpu2", 1, "ssh://k3@10.0.0.2", "10.0.0.2", ()),
    NodeLaunch("gpu3", 2, "ssh://k3@10.0.0.3", "10.0.0.3", ()),
)


def test_a_dead_row_is_missing_unless_the_address_came_back() -> None:
    output = (
        "2026-12-05 08:30:01 INFO worker.py -- Connecting to existing Ray cluster\n"
        '[{"address": "10.0.0.1", "alive": true}, {"address": "10.0.0.2", "alive": false}, '
        '{"address": "10.0.0.3", "alive": false}, {"address": "10.0.0.3", "alive": true}]\n'
    )
    alive = ray_alive(output)
    assert alive == {"10.0.0.1", "10.0.0.3"}  # gpu3 restarted: a new live row beside its dead one
    assert missing(NODES, alive) == ("gpu2",)


def test_every_member_alive_is_none_missing() -> None:
    assert missing(NODES, frozenset({"10.0.0.1", "10.0.0.2", "10.0.0.3"})) == ()
