"""A replica over several hosts (vllm.cluster / sglang.cluster) is one group of the fleet (issue 41 item 4), as a
llama.cpp main server with its RPC workers is: its nodes' hosts are no replicas, the plan prices and rolls it as one
unit naming the hosts it spans, and `fleet recover` takes a group with a dead node out of the router, re-converges it
on its head host and puts it back; decided with the in-memory router and host shell of test_fleet_groups.py. The
fleet file's refusals are case files (tests/cases/fleet/cluster_*.yaml)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from test_fleet_groups import FakeRouter, FakeShell

from kimik3_reconciler.cli.inputs import read_text
from kimik3_reconciler.errors import ProfileError
from kimik3_reconciler.fleet import parse_fleet
from kimik3_reconciler.fleet.gather import HostAnswer
from kimik3_reconciler.fleet.groups import group_hosts, member_states, members
from kimik3_reconciler.fleet.host_plan import HostPlan
from kimik3_reconciler.fleet.pricing import price_rollout
from kimik3_reconciler.fleet.recovery import dead_groups, recover
from kimik3_reconciler.fleet.report import plan_document, plan_lines, status_row

CASES = Path(__file__).parents[2] / "cases" / "fleet"
PROFILE = CASES / "profiles" / "vllm-pp2.yaml"
HEAD_STARTED = "2026-12-05T04:00:00.000000000Z"


def _fleet(tmp_path: Path, text: str, profile: str | None = None):  # noqa: ANN202 - fleet.Fleet
    shutil.copy(PROFILE, tmp_path / PROFILE.name)
    if profile is not None:
        (tmp_path / PROFILE.name).write_text(profile)
    (tmp_path / "fleet.yaml").write_text(text)
    return parse_fleet(text, str(tmp_path / "fleet.yaml"), read_text)


@pytest.fixture
def clusters(tmp_path: Path):  # noqa: ANN201 - fleet.Fleet: a and b head a two-host vLLM replica each
    return _fleet(tmp_path, yaml.safe_load((CASES / "ok_cluster_groups.yaml").read_text())["fleet"])


def _status(node: dict | None = None, alive: tuple[str, ...] | None = None) -> dict:
    """A head host's `kimik3 status --json`, as much of it as the fleet reads (`members`: the nodes' facts through
    their Docker; `ray_alive`: where Ray's table has a live raylet, None where it was not read)."""
    doc: dict = {"container": {"state": "running", "started_at": HEAD_STARTED}, "members": [node] if node else []}
    return {**doc, "ray_alive": list(alive) if alive is not None else None}


def _node(name: str, **fact: object) -> dict:
    return {"name": name, "container": {"state": "running", "started_at": "2026-12-05T03:59:00.000000000Z"}, **fact}


def test_a_cluster_is_one_group_its_nodes_no_replicas(clusters) -> None:  # noqa: ANN001
    assert [h.name for h in clusters.hosts] == ["a", "b"]
    assert clusters.rollout.batches() == (("a",), ("b",))
    (node,) = members(clusters.host("a").profile)
    assert (node.name, node.kind, node.field) == ("na", "node", ("vllm", "cluster", "nodes", 0))
    assert group_hosts(clusters.host("a")) == ("a", "10.0.0.11")


def test_fleet_plan_says_which_hosts_a_replica_spans_and_rolls_them_as_one(clusters) -> None:  # noqa: ANN001
    answers = tuple(HostAnswer(n, {}, version="1") for n in ("a", "b"))
    plans = {n: HostPlan(n, False, "1 to change", (), True, 90.0, None, 0, 0, "r@v/q", "https://hub") for n in "ab"}
    price = price_rollout(clusters.rollout, plans)
    lines = plan_lines(clusters, answers, plans, price)
    assert lines[1] == (
        "  group: replica a spans hosts a, 10.0.0.11: its head and cluster nodes na on 10.0.0.11 (10.0.0.11): "
        "one replica (out, applied, gated, back in together)"
    )
    canary = next(line for line in lines if line.startswith("  canary:"))
    assert canary.startswith("  canary: a (spans a, 10.0.0.11) at +0 s: a ~90 s downtime; 1 serving meanwhile")
    document = plan_document(clusters, answers, plans, price)["hosts"][1]
    assert document["spans"] == ["b", "10.0.0.12"]
    assert document["workers"] == [{"name": "nb", "kind": "node", "host": "10.0.0.12", "endpoint": "10.0.0.12"}]


def test_a_cluster_the_profile_names_is_every_hosts_refused_at_the_profiles_line(tmp_path: Path) -> None:
    """Two heads would share the profile's node (one head's ranks per node): named in the profile, where written."""
    profile = PROFILE.read_text() + (
        '  cluster:\n    bind: 10.0.0.1\n    nodes:\n      - {name: n, docker: "ssh://k3@10.0.0.9", bind: 10.0.0.9}\n'
    )
    line = len(profile.splitlines())
    fleet = yaml.safe_load((CASES / "ok_cluster_groups.yaml").read_text())["fleet"]
    fleet = fleet[: fleet.index("overrides:")] + (
        'overrides:\n  a: {serve: {host: 10.0.0.1}}\n  b: {serve: {host: 10.0.0.2}}\nrouter: {version: "1.13.0"}\n'
    )
    with pytest.raises(ProfileError) as refused:
        _fleet(tmp_path, fleet, profile)
    (problem,) = refused.value.problems
    assert (problem.source, problem.line, problem.field) == (
        str(tmp_path / PROFILE.name),
        line,
        "vllm.cluster.nodes[0].docker",
    )
    assert "node n runs on 10.0.0.9, which is already host a's node n" in problem.message


@pytest.mark.parametrize(
    ("status", "state", "why"),
    [
        (_status(_node("na")), "up", ""),
        (_status(_node("na"), alive=("10.0.0.1", "10.0.0.11")), "up", ""),
        (_status({"name": "na", "container": None}), "dead", "no node container"),
        (_status(_node("na", container={"state": "exited"})), "dead", "node container exited"),
        # A node starts after its head's container (Ray's head runs there first): no sign of a lost member.
        (_status(_node("na", container={"state": "running", "started_at": "2026-12-05T04:05:00Z"})), "up", ""),
        # Its container runs, but Ray's table has no live raylet at its address.
        (_status(_node("na"), alive=("10.0.0.1",)), "dead", "no live Ray node at 10.0.0.11"),
        (_status({"name": "na", "error": "ssh exited 255"}), "unknown", "its Docker does not answer: ssh exited 255"),
        (_status(), "unknown", "not in its main host's status"),
    ],
    ids=["up", "up-in-ray", "no-container", "exited", "started-after-head", "left-ray", "docker-down", "unreported"],
)
def test_a_nodes_state_comes_from_its_head_hosts_status(clusters, status: dict, state: str, why: str) -> None:  # noqa: ANN001
    (got,) = member_states(clusters.host("a"), status)
    assert (got.name, got.endpoint, got.state, got.why) == ("na", "10.0.0.11", state, why)


def test_a_group_with_a_dead_node_leaves_the_router_is_reconverged_on_its_head_and_returns(clusters) -> None:  # noqa: ANN001
    answers = (
        HostAnswer("a", _status(_node("na", container={"state": "exited"}))),
        HostAnswer("b", _status({"name": "nb", "error": "ssh exited 255"})),  # unknown: nothing says it is gone
    )
    dead = dead_groups(clusters, answers)
    assert list(dead) == ["a"]
    events: list[str] = []
    said: list[str] = []
    (done,) = recover(clusters, dead, FakeRouter(events), FakeShell(events), 60, said.append)
    # the head host's kimik3 converges the whole replica (the node's container through its Docker, then the server)
    assert events == ["out a", "apply a", "plan a", "verify a", "in a"]
    assert said[0] == "a: node dead (na dead (node container exited)): taken out of the router"
    assert done.ok and done.message == "a: recreated, back in rotation, sent traffic"


def test_fleet_status_shows_each_clusters_nodes(clusters) -> None:  # noqa: ANN001
    row = status_row(clusters, HostAnswer("a", _status(_node("na"), alive=("10.0.0.1",)), version="1"), {})
    assert row["group"] == "na dead (no live Ray node at 10.0.0.11)"
