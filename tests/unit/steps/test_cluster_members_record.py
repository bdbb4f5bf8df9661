"""A cluster's launched members are recorded (model/records.py cluster_members_key) so a node the profile drops is
found and its member removed (rule cluster-removed-node-removed): the launch records before it runs, the removal
forgets once removed, observe finds the dropped ones through their recorded Docker (not one whose URL only moved on
the same daemon), and the apply locks a dropped node's host, refusing an unreachable one with the hand clean-up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from support.fakes import FakeHub, fake_ports
from support.fakes.lock import FakeWorkerLocks
from support.fakes.state import FakeClock, MemoryState

from kimik3_reconciler.adapters.host_lock import StateDirLock
from kimik3_reconciler.errors import PlanError, TransientError
from kimik3_reconciler.model.labels import PROFILE_LABEL
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.model.records import cluster_members_key
from kimik3_reconciler.model.specs import ContainerSpec, DockerHost, MemberLaunch, MemberRemove
from kimik3_reconciler.model.state_room import WORKER_ENTRY_BYTES, step_records
from kimik3_reconciler.observe.cluster import collect_removed_members
from kimik3_reconciler.orchestrator import Orchestrator
from kimik3_reconciler.planning.cluster_render import node_members
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.cluster import launch_member, remove_member
from kimik3_reconciler.steps.report import NullReporter

CASES = Path(__file__).parents[2] / "cases/plan"
GPU2 = DockerHost("gpu2", "ssh://kimik3@10.0.0.2")
GPU3 = DockerHost("gpu3", "ssh://kimik3@10.0.0.3")


def profile(nodes: int):
    """The three-host base (kimi-k3 over gpu2 and gpu3), with its first `nodes` nodes (0: no cluster)."""
    data = yaml.safe_load((CASES / "_base-vllm-cluster-3.yaml").read_text())
    data["vllm"]["pipeline_parallel_size"] = nodes + 1
    data["vllm"]["cluster"]["nodes"] = data["vllm"]["cluster"]["nodes"][:nodes]
    if not nodes:
        del data["vllm"]["cluster"]
    return parse_profile(yaml.safe_dump(data), "p.yaml").profile


class NodeDocker:
    """A node's Docker: its containers by name, its daemon's ID (two URLs of one host answer the same)."""

    def __init__(self, daemon: str, containers: tuple[str, ...] = (), down: bool = False) -> None:
        self.daemon, self.down = daemon, down
        self.containers = {
            name: {"Name": f"/{name}", "Id": "c" * 64, "State": {"Status": "running"}} for name in containers
        }
        self.removed: list[str] = []

    def _reach(self) -> None:
        if self.down:
            raise TransientError("ssh: connect to host 10.0.0.3 port 22: Connection refused")

    def info(self) -> dict[str, Any]:
        self._reach()
        return {"ID": self.daemon}

    def inspect_container(self, name: str) -> dict[str, Any] | None:
        self._reach()
        return self.containers.get(name)

    def remove_container(self, name: str) -> None:
        self.removed.append(name)
        self.containers.pop(name, None)

    def run_container(self, spec: ContainerSpec) -> str:
        self.containers[spec.name] = {"Name": f"/{spec.name}", "Id": "d" * 64, "State": {"Status": "running"}}
        return "d" * 64


def _ports(state: MemoryState, dockers: dict[str, NodeDocker]) -> Ports:
    ports = Ports(docker=None, hub=None, http=None, host=None, state=state, clock=FakeClock())  # type: ignore[arg-type]
    ports.worker_docker = lambda host: dockers[host.url]
    return ports


def _member(name: str) -> ContainerSpec:
    return ContainerSpec(
        name=name, image="img", command=("ray",), env=(), mounts=(), gpus="all", labels=((PROFILE_LABEL, "kimi-k3"),)
    )


def test_a_launched_member_is_recorded_and_forgotten_once_removed() -> None:
    state = MemoryState()
    ports = _ports(state, {GPU3.url: NodeDocker("d3")})
    launch_member(MemberLaunch(GPU3, _member("kimi-k3-node-gpu3")), ports, NullReporter())
    assert state.read(cluster_members_key("kimi-k3")) == {
        "workers": [{"name": "gpu3", "docker": GPU3.url, "tls_dir": None, "container": "kimi-k3-node-gpu3"}]
    }
    remove_member(MemberRemove(GPU3, "kimi-k3-node-gpu3", "kimi-k3"), ports, NullReporter())
    assert state.read(cluster_members_key("kimi-k3")) is None


def test_observe_finds_the_dropped_nodes_member_through_its_recorded_docker() -> None:
    state = MemoryState()
    dockers = {GPU2.url: NodeDocker("d2", ("kimi-k3-node-gpu2",)), GPU3.url: NodeDocker("d3", ("kimi-k3-node-gpu3",))}
    ports = _ports(state, dockers)
    for host in (GPU2, GPU3):
        launch_member(MemberLaunch(host, _member(f"kimi-k3-node-{host.name}")), ports, NullReporter())
    (dropped,) = collect_removed_members(profile(1), ports.worker_docker, state)
    assert (dropped.name, dropped.container_name, dropped.container.state) == ("gpu3", "kimi-k3-node-gpu3", "running")
    # The cluster gone altogether: every recorded member is dropped.
    assert [f.name for f in collect_removed_members(profile(0), ports.worker_docker, state)] == ["gpu2", "gpu3"]


def test_a_node_whose_docker_url_only_moved_on_the_same_daemon_is_not_dropped() -> None:
    state = MemoryState()
    moved = DockerHost("gpu3", "tcp://10.0.0.3:2376", "/etc/k3/gpu3")
    one = NodeDocker("d3", ("kimi-k3-node-gpu3",))
    ports = _ports(state, {GPU3.url: one, moved.url: one, GPU2.url: NodeDocker("d2")})
    launch_member(MemberLaunch(GPU3, _member("kimi-k3-node-gpu3")), ports, NullReporter())
    data = yaml.safe_load((CASES / "_base-vllm-cluster-3.yaml").read_text())
    data["vllm"]["cluster"]["nodes"][1].update({"docker": moved.url, "tls_dir": moved.tls_dir})
    named = parse_profile(yaml.safe_dump(data), "p.yaml").profile
    assert collect_removed_members(named, ports.worker_docker, state) == ()


def test_an_unreachable_dropped_node_is_recorded_and_its_lock_refused_with_the_hand_clean_up(tmp_path: Path) -> None:
    state = MemoryState()
    ports = _ports(state, {GPU3.url: NodeDocker("d3", ("kimi-k3-node-gpu3",))})
    launch_member(MemberLaunch(GPU3, _member("kimi-k3-node-gpu3")), ports, NullReporter())
    ports.worker_docker = lambda host: NodeDocker("d3", down=True)
    (fact,) = collect_removed_members(profile(1), ports.worker_docker, state)
    assert fact.error and "Connection refused" in fact.error
    real, _ = fake_ports(FakeHub("org/k3", "ab" * 20, {}, tmp_path / "hub"))
    real.lock, real.worker_lock, real.state = StateDirLock(tmp_path / "state"), FakeWorkerLocks(down=(GPU3.url,)), state
    e = Orchestrator(real, NullReporter(), tmp_path, tmp_path / "Dockerfile.llamacpp")
    with pytest.raises(PlanError) as refused, e.locked("apply", profile(1), timeout_s=0):
        pytest.fail("the block ran without the dropped node's lock")
    message = str(refused.value)
    assert message.startswith(f"cluster node gpu3: cannot take the apply lock in its Docker at {GPU3.url}")
    assert "the profile no longer names this node" in message and cluster_members_key("kimi-k3") in message
    assert "docker rm -f kimi-k3-node-gpu3" in message


def test_a_member_launch_or_removal_counts_its_record_before_a_server_goes_down() -> None:
    launch = MemberLaunch(GPU3, _member("kimi-k3-node-gpu3"), replace=True)
    assert step_records(launch, 2) == (("cluster-members", 2 * WORKER_ENTRY_BYTES),)
    assert step_records(MemberRemove(GPU3, "kimi-k3-node-gpu3", "kimi-k3"), 0) == (
        ("cluster-members", WORKER_ENTRY_BYTES),
    )


def test_a_converged_apply_records_every_named_member() -> None:
    assert node_members(profile(2)) == ((GPU2, "kimi-k3-node-gpu2"), (GPU3, "kimi-k3-node-gpu3"))
    assert node_members(profile(0)) == ()
