"""Whether a cluster node's Docker can give its member the GPUs it asks for, and which way it asks (pure).

A node's member container is rendered with the head's GPU request (planning/cluster_render.py `member_container`):
CDI devices (`--device nvidia.com/gpu=ID`) where the head's Docker has CDI, the nvidia runtime (`--gpus`) otherwise.
A node's own Docker may give GPUs only the other way (CDI there, only the runtime here): its member then asks that way
(`node_request`; the request is outside the member's fingerprint, so nothing is replaced for it), as each host's
containers ask the way its own Docker gives them. Both are decided by model/gpu_request.py, which also judges the
head's own plumbing (planning/gpu_probe.py); a node's is read through its Docker's API alone (observe/cluster.py:
`docker info`; its files, the toolkit's hook among them, are out of reach) and judged here, before anything changes:
otherwise the member's `docker run` fails on that host after the head's server was replaced."""

from __future__ import annotations

from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.facts import DockerGpus, MemberFact
from kimik3_reconciler.model.gpu_request import choose_request, missing, other_way
from kimik3_reconciler.model.specs import ContainerSpec


def missing_gpu_plumbing(spec: ContainerSpec, gpus: DockerGpus) -> str | None:
    """What the node's Docker lacks for `spec`'s GPU request (the member's, copied from the head's), and how to add
    it; None when nothing is missing that its API can show."""
    return missing(gpus, spec.gpu_request, spec.gpus)


def node_request(spec: ContainerSpec, gpus: DockerGpus | None) -> str:
    """How the member asks its node's Docker for GPUs: as the head's container does where that Docker shows it can,
    else the other way where it shows that one (model/gpu_request.py, the head's own decision too), else the head's
    way (refused by `refuse_node_gpus`)."""
    if gpus is None:
        return spec.gpu_request
    return choose_request(gpus, spec.gpus, spec.gpu_request) or spec.gpu_request


def refuse_node_gpus(spec: ContainerSpec, fact: MemberFact, field: str) -> None:
    """PlanError naming the node, its Docker's field (`vllm.cluster.nodes[1].docker`) and what its Docker lacks for
    either way of asking for GPUs."""
    if fact.gpus is None:  # not read: the node gets no GPUs, or facts made without it
        return
    if choose_request(fact.gpus, spec.gpus, spec.gpu_request) is not None:
        return
    # rule: cluster-node-gpu-plumbing
    # Found after the head's server was replaced, the member's `docker run` fails there: the replica is down.
    lacks = missing(fact.gpus, spec.gpu_request, spec.gpus)
    other = other_way(spec.gpu_request)
    if other == "cdi" and fact.gpus.cdi_devices is None and fact.gpus.reads_cdi:
        nor = "no CDI devices it lists (`docker info`: DiscoveredDevices, Docker 28.2+)"
    else:
        nor = missing(fact.gpus, other, spec.gpus) or ""
    how = "CDI devices" if spec.gpu_request == "cdi" else "the nvidia runtime"
    raise PlanError(
        f"cluster node {fact.name} ({field}): its Docker at {fact.docker} has {lacks}; nor {nor.removeprefix('no ')}."
        f" Its member asks for its GPUs the way the head's Docker gives them ({how}), or the other way where its own "
        "Docker shows that one; nothing was changed"
    )
