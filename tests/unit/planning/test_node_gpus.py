"""A cluster node's GPU plumbing (planning/node_gpus.py, observe/cluster.py): read from its Docker's `docker info`
only where the node gets GPUs, and judged against the GPU request its member copies from the head's (the plan cases
219-220 refuse through the whole planner)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from support.fakes.docker import FakeDocker
from test_plan_cases import CASES, build_case

from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.facts import DockerGpus, MemberFact
from kimik3_reconciler.model.profile import node_gpus_of
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.model.specs import ContainerSpec
from kimik3_reconciler.observe.cluster import collect_member
from kimik3_reconciler.observe.docker_objects import parse_docker_gpus
from kimik3_reconciler.planning import plan
from kimik3_reconciler.planning.node_gpus import missing_gpu_plumbing, node_request, refuse_node_gpus

IMAGE = "vllm/vllm-openai:kimi-k3@sha256:" + "1" * 64
FIELD = "vllm.cluster.nodes[0].docker"
# Docker 28's /info on a host with the toolkit's CDI spec and its runtime registered (its own words: Source, ID).
DOCKER_28 = {
    "ServerVersion": "28.3.0",
    "Runtimes": {"nvidia": {"path": "nvidia-container-runtime"}, "runc": {"path": "runc"}},
    "CDISpecDirs": ["/etc/cdi", "/var/run/cdi"],
    "DiscoveredDevices": [
        {"Source": "cdi", "ID": "nvidia.com/gpu=0"},
        {"Source": "cdi", "ID": "nvidia.com/gpu=1"},
        {"Source": "cdi", "ID": "nvidia.com/gpu=all"},
        {"Source": "cdi", "ID": "vendor.com/fpga=0"},
    ],
}


def member(gpus: str | tuple[str, ...] = "all", request: str = "runtime") -> ContainerSpec:
    return ContainerSpec(
        name="kimi-k3-node-gpu2",
        image=IMAGE,
        entrypoint=("ray",),
        command=("start",),
        env=(),
        mounts=(),
        gpus=gpus,
        labels=(),
        gpu_request=request,
    )


def test_docker_info_says_runtime_cdi_and_the_gpu_devices_it_found() -> None:
    assert parse_docker_gpus(DOCKER_28) == DockerGpus(
        runtime=True, reads_cdi=True, cdi_devices=("nvidia.com/gpu=0", "nvidia.com/gpu=1", "nvidia.com/gpu=all")
    )
    # Older daemons list no devices (only their reading CDI is known); Docker 20 (this machine's) reads none.
    older = parse_docker_gpus({"ServerVersion": "26.1.0", "Runtimes": {"runc": {}}})
    assert older == DockerGpus(runtime=False, reads_cdi=True, cdi_devices=None)
    assert parse_docker_gpus({"ServerVersion": "20.10.24+dfsg1", "Runtimes": {"runc": {}}}).reads_cdi is False
    assert parse_docker_gpus({**DOCKER_28, "CDISpecDirs": []}).reads_cdi is False  # CDI turned off


def test_the_runtime_request_needs_the_nvidia_runtime_on_the_node() -> None:
    fine = parse_docker_gpus(DOCKER_28)
    assert missing_gpu_plumbing(member(), fine) is None
    cdi_only = DockerGpus(runtime=False, reads_cdi=True, cdi_devices=("nvidia.com/gpu=all",))
    assert missing_gpu_plumbing(member(), cdi_only).startswith("no nvidia runtime (`docker info`: Runtimes)")
    assert missing_gpu_plumbing(member("none"), DockerGpus()) is None  # no GPUs asked: nothing needed


def test_the_cdi_request_needs_cdi_and_each_device_the_member_asks_for() -> None:
    fine = parse_docker_gpus(DOCKER_28)
    assert missing_gpu_plumbing(member("all", "cdi"), fine) is None
    assert missing_gpu_plumbing(member(("0", "1"), "cdi"), fine) is None
    short = missing_gpu_plumbing(member(("0", "1", "2", "3"), "cdi"), fine)
    assert short.startswith("no CDI device nvidia.com/gpu=2, nvidia.com/gpu=3 (`docker info`: DiscoveredDevices")
    off = missing_gpu_plumbing(member("all", "cdi"), DockerGpus(runtime=True, reads_cdi=False))
    assert off.startswith("no CDI: the daemon reads no CDI specs (`docker info`: CDISpecDirs)")
    # A daemon that reads CDI but does not list its devices: nothing more is known, nothing refused.
    assert missing_gpu_plumbing(member("all", "cdi"), DockerGpus(reads_cdi=True, cdi_devices=None)) is None


def test_the_refusal_names_the_node_its_field_its_docker_and_what_each_way_lacks() -> None:
    fact = MemberFact(name="gpu2", docker="ssh://kimik3@10.0.0.2", gpus=DockerGpus(reads_cdi=False))
    with pytest.raises(PlanError) as refused:
        refuse_node_gpus(member(), fact, FIELD)
    assert str(refused.value).startswith(
        f"cluster node gpu2 ({FIELD}): its Docker at ssh://kimik3@10.0.0.2 has no nvidia runtime"
    )
    assert "; nor CDI: the daemon reads no CDI specs (`docker info`: CDISpecDirs)" in str(refused.value)
    assert str(refused.value).endswith("nothing was changed")
    unlisted = fact.model_copy(update={"gpus": DockerGpus(reads_cdi=True)})  # Docker 26: reads CDI, lists nothing
    with pytest.raises(PlanError, match=r"nor CDI devices it lists \(`docker info`: DiscoveredDevices"):
        refuse_node_gpus(member(), unlisted, FIELD)
    refuse_node_gpus(member(), fact.model_copy(update={"gpus": None}), FIELD)  # not read: nothing to judge


def test_a_node_whose_docker_gives_gpus_only_the_other_way_gets_them_that_way() -> None:
    """The head's Docker has no CDI (its containers use --gpus), the node's has CDI and no runtime registered, or the
    other way round: the member asks as its own Docker gives, not refused (plan case 222)."""
    cdi_only = DockerGpus(runtime=False, reads_cdi=True, cdi_devices=("nvidia.com/gpu=0", "nvidia.com/gpu=all"))
    assert node_request(member(), cdi_only) == "cdi"
    assert node_request(member(("0",)), cdi_only) == "cdi"
    assert node_request(member(("0", "1")), cdi_only) == "runtime"  # gpu=1 not listed: the head's way, refused
    runtime_only = DockerGpus(runtime=True, reads_cdi=False)
    assert node_request(member("all", "cdi"), runtime_only) == "runtime"
    both = parse_docker_gpus(DOCKER_28)
    assert node_request(member(), both) == "runtime" and node_request(member("all", "cdi"), both) == "cdi"
    # A daemon that lists no devices (before 28.2) may not read CDI at all: never switched to CDI on a guess.
    assert node_request(member(), DockerGpus(runtime=False, reads_cdi=True)) == "runtime"
    fact = MemberFact(name="gpu2", docker="ssh://kimik3@10.0.0.2", gpus=cdi_only)
    refuse_node_gpus(member(), fact, FIELD)  # not refused


def test_the_planned_member_asks_the_way_its_own_docker_gives_gpus() -> None:
    case = yaml.safe_load((CASES / "222-vllm-cluster-node-gpus-its-own-way.yaml").read_text())
    (step,) = [s for s in plan(*build_case(case)).steps if s.kind == "member"]
    assert step.spec.container.gpu_request == "cdi" and step.spec.container.gpus == "all"


def test_a_node_is_asked_for_its_docker_info_only_when_it_gets_gpus() -> None:
    docker = FakeDocker()
    asked: list[bool] = []
    docker.info = lambda: (asked.append(True), DOCKER_28)[1]
    node = SimpleNamespace(name="gpu2", docker="ssh://kimik3@10.0.0.2", gpus="all", container_name=lambda p: f"{p}-n")
    assert collect_member("kimi-k3", node, docker, IMAGE, "all").gpus == parse_docker_gpus(DOCKER_28)
    cpu = collect_member("kimi-k3", node, docker, IMAGE, "none")
    assert cpu.gpus is None and asked == [True]


def _cluster(**top: object):
    path = Path(__file__).parents[2] / "cases/plan/_base-vllm-cluster.yaml"
    data = {**yaml.safe_load(path.read_text()), **top}
    data["vllm"] = {**data["vllm"], "tensor_parallel_size": 1, "any_gpu": top.get("gpus") != "none"}
    return parse_profile(yaml.safe_dump(data), "p.yaml").profile


def test_a_cpu_profiles_node_gets_no_gpus_whatever_its_default_says() -> None:
    """`gpus: none` (vLLM's CPU build, the image every node runs): the node's `gpus` default (all) asked its CPU host
    for `--gpus all`, which only a host with the nvidia runtime gives."""
    cpu = _cluster(gpus="none")
    assert cpu.cluster.nodes[0].gpus == "all"  # the node's own default
    assert node_gpus_of(cpu, cpu.cluster.nodes[0]) == "none"
    gpu = _cluster(gpus=[0])
    assert node_gpus_of(gpu, gpu.cluster.nodes[0]) == "all"  # a GPU profile's node keeps its own


def test_a_docker_that_lists_devices_and_found_none_omits_the_field_and_is_read_as_none_found() -> None:
    """moby's system.Info has `DiscoveredDevices []DeviceInfo json:",omitempty"` (api/types/system/info.go, 28.2
    to 29.x): a 28.2+ daemon (API 1.50, which kimik3's client negotiates) whose drivers found nothing sends no field
    at all, not []. Read as a daemon that lists nothing, that node's CDI request passed the check and its member's
    `--device nvidia.com/gpu=all` failed after the head's server was replaced."""
    found_none = {k: v for k, v in DOCKER_28.items() if k != "DiscoveredDevices"}
    assert parse_docker_gpus(found_none).cdi_devices == ()
    assert parse_docker_gpus({**found_none, "ServerVersion": "29.4.0"}).cdi_devices == ()
    lacks = missing_gpu_plumbing(member("all", "cdi"), parse_docker_gpus(found_none))
    assert lacks is not None and lacks.startswith("no CDI device nvidia.com/gpu=all")
    # Before 28.2 (API < 1.50) the field does not exist: only the daemon's reading CDI is known.
    for version in ("28.1.1", "27.5.1", "26.1.0"):
        assert parse_docker_gpus({**found_none, "ServerVersion": version}).cdi_devices is None
