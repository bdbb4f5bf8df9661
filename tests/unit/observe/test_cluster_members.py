"""observe/cluster.py reads Ray's node table (RAY_NODES' output, in the shape Ray 2.60 printed it in
tests/integration/test_ray_cluster.py) into the replica's missing members."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kimik3_reconciler.engines.base import NodeLaunch
from kimik3_reconciler.observe.cluster import RAY_NODES, missing, ray_alive, ray_nodes_argv

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


def _fake_ray(root: Path, raylet: str) -> dict[str, str]:
    """A `ray` package whose GCS never answers: `raylet` is its ray/_raylet.py; its driver's `ray.init()` hangs too."""
    (root / "ray" / "core" / "generated").mkdir(parents=True)
    (root / "ray" / "__init__.py").write_text("import time\n\ndef init(**_):\n    time.sleep(600)\n")
    (root / "ray" / "_raylet.py").write_text(raylet)
    (root / "ray" / "core" / "__init__.py").write_text("")
    (root / "ray" / "core" / "generated" / "__init__.py").write_text("")
    (root / "ray" / "core" / "generated" / "gcs_pb2.py").write_text("class GcsNodeInfo:\n    ALIVE = 0\n")
    return {"PATH": os.environ["PATH"], "PYTHONPATH": str(root), "RAY_ADDRESS": "127.0.0.2:6399"}


HANGING_CLIENT = (
    "import time\n\nclass GcsClient:\n    def __init__(self, address):\n        pass\n\n"
    "    def get_all_node_info(self, timeout):\n        time.sleep(600)\n"
)


@pytest.mark.parametrize("raylet", [HANGING_CLIENT, ""], ids=["gcs-client", "driver-fallback"])
def test_a_read_of_a_gcs_that_never_answers_ends_at_its_bound(tmp_path: Path, raylet: str) -> None:
    """The GCS down: Ray's client took ~42 s, the fallback's `ray.init()` never returned; every plan and status
    waited on it through `docker exec`. The kernel ends the read at its bound; it prints nothing, which is named."""
    env = _fake_ray(tmp_path, raylet)
    started = time.monotonic()
    done = subprocess.run([sys.executable, *ray_nodes_argv(1)[1:]], env=env, capture_output=True, timeout=30)
    assert time.monotonic() - started < 10 and done.returncode != 0 and done.stdout == b""
    with pytest.raises(ValueError, match=r"no answer from Ray's GCS within \d+ s"):
        ray_alive(done.stdout.decode())


def test_the_gcs_clients_table_is_read_without_a_driver(tmp_path: Path) -> None:
    raylet = (
        "from types import SimpleNamespace as Node\n\nclass GcsClient:\n    def __init__(self, address):\n"
        "        assert address == '127.0.0.2:6399'\n\n    def get_all_node_info(self, timeout):\n"
        "        return {b'a': Node(node_manager_address='10.0.0.1', state=0),\n"
        "                b'b': Node(node_manager_address='10.0.0.2', state=1)}\n"
    )
    env = _fake_ray(tmp_path, raylet)
    done = subprocess.run([sys.executable, *RAY_NODES[1:]], env=env, capture_output=True, timeout=30, check=True)
    assert ray_alive(done.stdout.decode()) == {"10.0.0.1"}  # no `ray.init()`: the fake's would hang
