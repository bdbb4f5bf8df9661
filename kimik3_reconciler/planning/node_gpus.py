"""Whether a cluster node's Docker can give its member the GPUs it asks for, and which way it asks (pure).

A node's member container is rendered with the head's GPU request (planning/cluster_render.py `member_container`):
CDI devices (`--device nvidia.com/gpu=ID`) where the head's Docker has CDI, the nvidia runtime (`--gpus`) otherwise.
A node's own Docker may give GPUs only the other way (CDI there, only the runtime here): its member then asks that way
(`node_request`; the request is outside the member's fingerprint, so nothing is replaced for it), as each host's
containers ask the way its own Docker gives them. The head's own plumbing is judged by the host gate; a node's is read
through its Docker's API (observe/cluster.py: `docker info`, its files are out of reach) and judged here, before
anything changes: otherwise the member's `docker run` fails on that host after the head's server was replaced."""

from __future__ import annotations

from dataclasses import replace

from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.facts import DockerGpus, MemberFact
from kimik3_reconciler.model.specs import ContainerSpec

_RUNTIME_FIX = (
    "install nvidia-container-toolkit there and register its runtime (`nvidia-ctk runtime configure "
    "--runtime=docker`, then restart dockerd)"
)
_CDI_FIX = "generate the toolkit's CDI spec there (`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`)"


def missing_gpu_plumbing(spec: ContainerSpec, gpus: DockerGpus) -> str | None:
    """What the node's Docker lacks for `spec`'s GPU request (the member's, copied from the head's), and how to add
    it; None when nothing is missing that its API can show."""
    if spec.gpus == "none":
        return None
    if spec.gpu_request != "cdi":
        if gpus.runtime:
            return None
        return f"no nvidia runtime (`docker info`: Runtimes), which `--gpus` needs: {_RUNTIME_FIX}"
    if not gpus.reads_cdi:
        return (
            "no CDI: the daemon reads no CDI specs (`docker info`: CDISpecDirs), which `--device nvidia.com/gpu=…` "
            f'needs: turn CDI on there (Docker 25+; `"features": {{"cdi": true}}` in daemon.json before 28) and {_CDI_FIX}'
        )
    if gpus.cdi_devices is None:
        return None  # a daemon that does not list its devices: its reading CDI is all that is known
    wanted = ("all",) if spec.gpus == "all" else spec.gpus
    absent = [f"nvidia.com/gpu={g}" for g in wanted if f"nvidia.com/gpu={g}" not in gpus.cdi_devices]
    if not absent:
        return None
    found = ", ".join(gpus.cdi_devices) or "none"
    return (
        f"no CDI device {', '.join(absent)} (`docker info`: DiscoveredDevices lists {found}), which "
        f"`--device` needs: {_CDI_FIX}"
    )


def node_request(spec: ContainerSpec, gpus: DockerGpus | None) -> str:
    """How the member asks its node's Docker for GPUs: as the head's container does where that Docker shows it can,
    else the other way where it shows that one (each host's containers ask as its own Docker gives GPUs, as the head's
    do: GpuPlumbing.request), else the head's way (refused by `refuse_node_gpus`)."""
    if gpus is None or spec.gpus == "none" or missing_gpu_plumbing(spec, gpus) is None:
        return spec.gpu_request
    other = _other(spec)
    # CDI only where the daemon lists the devices: one that lists none (before Docker 28.2) may not read CDI at all.
    if other.gpu_request == "cdi" and gpus.cdi_devices is None:
        return spec.gpu_request
    return other.gpu_request if missing_gpu_plumbing(other, gpus) is None else spec.gpu_request


def _other(spec: ContainerSpec) -> ContainerSpec:
    return replace(spec, gpu_request="runtime" if spec.gpu_request == "cdi" else "cdi")


def refuse_node_gpus(spec: ContainerSpec, fact: MemberFact, field: str) -> None:
    """PlanError naming the node, its Docker's field (`vllm.cluster.nodes[1].docker`) and what its Docker lacks for
    either way of asking for GPUs."""
    if fact.gpus is None:  # not read: the node gets no GPUs, or facts made without it
        return
    if missing_gpu_plumbing(replace(spec, gpu_request=node_request(spec, fact.gpus)), fact.gpus) is None:
        return
    # rule: cluster-node-gpu-plumbing
    # Found after the head's server was replaced, the member's `docker run` fails there: the replica is down.
    missing = missing_gpu_plumbing(spec, fact.gpus)
    other = _other(spec)
    if other.gpu_request == "cdi" and fact.gpus.cdi_devices is None and fact.gpus.reads_cdi:
        nor = "no CDI devices it lists (`docker info`: DiscoveredDevices, Docker 28.2+)"
    else:
        nor = missing_gpu_plumbing(other, fact.gpus) or ""
    how = "CDI devices" if spec.gpu_request == "cdi" else "the nvidia runtime"
    raise PlanError(
        f"cluster node {fact.name} ({field}): its Docker at {fact.docker} has {missing}; nor {nor.removeprefix('no ')}."
        f" Its member asks for its GPUs the way the head's Docker gives them ({how}), or the other way where its own "
        "Docker shows that one; nothing was changed"
    )
