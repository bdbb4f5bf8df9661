"""The steps of a replica over several hosts (steps/cluster.py) against in-memory Dockers: the node's checkpoint check
(rule cluster-node-checkpoint: a file absent or of another size stops the apply naming the node, the field and the
file), and the wait on Ray's node table through the head's container (done when every address is alive; a head that
exits ends it with its log). The real parts: tests/integration/test_vllm_cluster_docker.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.fakes.state import FakeClock

from kimik3_reconciler.errors import LoadFailed, PermanentError
from kimik3_reconciler.model.specs import ContainerSpec, DockerHost, MemberCheckpoint, MemberWait, Mount
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.cluster import check_member_checkpoint, wait_for_members
from kimik3_reconciler.steps.report import NullReporter

NODE = DockerHost("gpu2", "ssh://kimik3@10.0.0.2")
SNAPSHOT = "/models/models--org--tiny/snapshots/" + "a" * 40
CHECK = ContainerSpec(
    name="k3-node-gpu2-checkpoint",
    image="img@sha256:" + "1" * 64,
    command=(SNAPSHOT,),
    env=(),
    mounts=(Mount("/var/lib/kimik3/hub/models--org--tiny", "/models/models--org--tiny", read_only=True),),
    gpus="none",
    labels=(),
)
VERIFIED = (("config.json", 700), ("model.safetensors", 4096))


class ListingDocker:
    """A node's Docker whose check container prints `listing` (or fails with `code`)."""

    def __init__(self, listing: dict[str, int], code: int = 0) -> None:
        self.listing, self.code = listing, code
        self.ran: list[ContainerSpec] = []

    def run_to_completion(self, spec: ContainerSpec, timeout_s: float) -> tuple[int, str, str]:
        self.ran.append(spec)
        return self.code, json.dumps(self.listing) + "\n", "" if self.code == 0 else "python3: not found"


def _ports(docker: Any, node: Any = None) -> Ports:
    ports = Ports(docker=docker, hub=None, http=None, host=None, state=None, clock=FakeClock())  # type: ignore[arg-type]
    ports.worker_docker = lambda host: node
    return ports


def test_a_node_holding_the_verified_files_passes_the_check() -> None:
    node = ListingDocker({"config.json": 700, "model.safetensors": 4096, "README.md": 10})
    check_member_checkpoint(MemberCheckpoint(NODE, CHECK, SNAPSHOT, VERIFIED), _ports(None, node), NullReporter())
    assert node.ran == [CHECK]


@pytest.mark.parametrize(
    "listing, says",
    [
        ({"config.json": 700}, "model.safetensors (absent)"),
        ({"config.json": 700, "model.safetensors": 1024}, "model.safetensors (1024 bytes, verified 4096)"),
    ],
)
def test_a_node_without_the_verified_files_stops_the_apply_naming_node_field_and_file(
    listing: dict[str, int], says: str
) -> None:
    with pytest.raises(PermanentError) as stopped:
        check_member_checkpoint(
            MemberCheckpoint(NODE, CHECK, SNAPSHOT, VERIFIED), _ports(None, ListingDocker(listing)), NullReporter()
        )
    message = str(stopped.value)
    assert "cluster node gpu2" in message and "model.cache_dir" in message and says in message
    assert "/var/lib/kimik3/hub/models--org--tiny" in message  # where to copy it: the same path as on the head


def test_a_check_container_that_fails_says_so() -> None:
    with pytest.raises(PermanentError, match="listing the checkpoint .* failed \\(exit 127\\).*python3: not found"):
        check_member_checkpoint(
            MemberCheckpoint(NODE, CHECK, SNAPSHOT, VERIFIED), _ports(None, ListingDocker({}, 127)), NullReporter()
        )


class HeadDocker:
    """The head's Docker: its container's state, and Ray's node table as RAY_NODES prints it, one read at a time."""

    def __init__(self, tables: list[list[dict[str, Any]] | None], state: str = "running") -> None:
        self.tables, self.state, self.reads = tables, state, 0

    def inspect_container(self, name: str) -> dict[str, Any]:
        return {"State": {"Status": self.state}}

    def exec_output(self, name: str, argv: list[str]) -> str:
        table = self.tables[min(self.reads, len(self.tables) - 1)]
        self.reads += 1
        return "" if table is None else "2026-12-05 INFO worker.py:1 Connecting\n" + json.dumps(table) + "\n"

    def container_logs(self, name: str, tail: int) -> str:
        return "ray.exceptions.RaySystemError: GCS unreachable"


def _rows(*alive: str, dead: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    return [{"address": a, "alive": True} for a in alive] + [{"address": d, "alive": False} for d in dead]


def test_the_wait_ends_when_every_address_has_a_live_raylet() -> None:
    head = HeadDocker(
        [None, _rows("127.0.0.2", dead=("127.0.0.3",)), _rows("127.0.0.2", "127.0.0.3", dead=("127.0.0.3",))]
    )
    wait_for_members(MemberWait("k3", ("127.0.0.2", "127.0.0.3"), 300.0), _ports(head), NullReporter())
    assert head.reads == 3  # unread (Ray's head starting), one node short, then both (a dead old row beside)


def test_the_wait_gives_up_naming_the_missing_address() -> None:
    head = HeadDocker([_rows("127.0.0.2")])
    with pytest.raises(LoadFailed, match="no live raylet at 127.0.0.3 after 30 s"):
        wait_for_members(MemberWait("k3", ("127.0.0.2", "127.0.0.3"), 30.0), _ports(head), NullReporter())


def test_a_head_that_exits_ends_the_wait_with_its_log() -> None:
    with pytest.raises(LoadFailed, match="k3 is exited") as ended:
        wait_for_members(MemberWait("k3", ("127.0.0.2",), 300.0), _ports(HeadDocker([None], "exited")), NullReporter())
    assert "GCS unreachable" in ended.value.log_tail
