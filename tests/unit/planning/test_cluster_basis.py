"""A saved plan of a cluster holds only while its nodes are as observed (planning/basis.py): a member that died, a
node's Docker gone, Ray's table losing an address or a dropped node's member all move its basis."""

from __future__ import annotations

from pathlib import Path

from support.observed import observed

from kimik3_reconciler.model.facts import ContainerFact, MemberFact, RemovedWorkerFact
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.planning.basis import observed_basis

RUNNING = ContainerFact(id="m" * 64, name="k3-node-gpu2", state="running", fingerprint="f1")


PROFILE = parse_profile(
    (Path(__file__).parents[2] / "cases/plan/_base-vllm-cluster.yaml").read_text(), "p.yaml"
).profile


def _basis(**updates) -> dict[str, str]:  # noqa: ANN003 - Observed's fields
    return observed_basis(PROFILE, observed(PROFILE, **updates))


def test_a_members_death_its_docker_and_rays_table_move_the_basis() -> None:
    node = MemberFact(name="gpu2", docker="ssh://k3@10.0.0.2", image_present=True, container=RUNNING)
    before = _basis(members=(node,), ray_alive=("10.0.0.1", "10.0.0.2"))
    assert before["node gpu2"].startswith("member running mmmmmmmmmmmm") and before["node gpu2"].endswith("present")
    exited = node.model_copy(update={"container": RUNNING.model_copy(update={"state": "exited"})})
    assert _basis(members=(exited,), ray_alive=("10.0.0.1", "10.0.0.2"))["node gpu2"] != before["node gpu2"]
    gone = node.model_copy(update={"error": "ssh: refused", "container": None})
    assert _basis(members=(gone,), ray_alive=None)["node gpu2"] == "unreachable (ssh: refused)"
    assert _basis(members=(node,), ray_alive=("10.0.0.1",))["ray alive"] != before["ray alive"]


def test_a_dropped_nodes_member_is_in_the_basis_and_no_cluster_adds_nothing() -> None:
    dropped = RemovedWorkerFact(name="gpu3", docker="ssh://k3@10.0.0.3", container_name="k3-node-gpu3")
    assert _basis(removed_members=(dropped,))["dropped node gpu3 (ssh://k3@10.0.0.3)"] == "gone"
    assert not any(k.startswith(("node ", "ray ", "dropped node")) for k in _basis())
