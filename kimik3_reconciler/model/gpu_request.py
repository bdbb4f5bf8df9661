"""Which way containers ask a Docker for GPUs, and what that Docker lacks for a way (pure): one decision for the
head's host (planning/gpu_probe.py's gate, planning/launch.py's containers) and for a cluster node's
(planning/node_gpus.py).

Two ways: CDI devices (`--device nvidia.com/gpu=ID`, seed 000 step 1) where the daemon reads CDI and has the
devices, and `--gpus` where the nvidia runtime is registered or dockerd has the toolkit's hook on its PATH (moby's
nvidia device driver: `--gpus` needs no registered runtime). A container asks the first way (the head: CDI; a node:
the head's way) where its Docker shows it, else the other way where that is shown, else nothing can be asked."""

from __future__ import annotations

from kimik3_reconciler.model.facts import DockerGpus

GpuIds = str | tuple[str, ...]  # "none", "all" or device ids (ContainerSpec.gpus)

_CDI_FIX = "generate the toolkit's CDI spec {where} (`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`)"


def other_way(request: str) -> str:
    return "runtime" if request == "cdi" else "cdi"


def missing(gpus: DockerGpus, request: str, wanted: GpuIds, here: bool = False) -> str | None:
    """What the Docker lacks to give `wanted` the `request` way ("cdi" | "runtime"), and how to add it; None when
    nothing is missing that it shows. `here`: the head's host (its files read too), else a node ("there")."""
    if wanted == "none":  # a CPU container asks Docker for no GPUs: no way of asking can be missing
        return None
    where = "here" if here else "there"
    if request != "cdi":  # `--gpus`: a registered runtime or the hook is all a Docker shows of it
        return None if gpus.runtime_gpus else _missing_runtime(gpus, where)
    cdi_fix = _CDI_FIX.format(where=where)
    if not gpus.reads_cdi:  # a daemon without CDI refuses every `--device nvidia.com/gpu=…`, whatever specs exist
        return (
            "no CDI: the daemon reads no CDI specs (`docker info`: CDISpecDirs), which `--device nvidia.com/gpu=…` "
            f'needs: turn CDI on {where} (Docker 25+; `"features": {{"cdi": true}}` in daemon.json before 28) and '
            f"{cdi_fix}"
        )
    if gpus.cdi_devices is None:
        return None  # a daemon that does not list its devices: its reading CDI is all that is known
    ids = ("all",) if wanted == "all" else wanted
    absent = [f"nvidia.com/gpu={g}" for g in ids if f"nvidia.com/gpu={g}" not in gpus.cdi_devices]
    if not absent:
        return None
    found = ", ".join(gpus.cdi_devices) or "none"
    seen = (
        "the daemon's DiscoveredDevices or, where it lists none, the nvidia.com/gpu specs in /etc/cdi and /var/run/cdi"
        if here
        else "`docker info`: DiscoveredDevices"
    )
    return f"no CDI device {', '.join(absent)} ({seen} lists {found}), which `--device` needs: {cdi_fix}"


def _missing_runtime(gpus: DockerGpus, where: str) -> str:
    if gpus.hook is None:  # a node: only its API is read, the hook on its disk is unseen
        return (
            "no nvidia runtime (`docker info`: Runtimes), which `--gpus` needs: install nvidia-container-toolkit "
            f"{where} and register its runtime (`nvidia-ctk runtime configure --runtime=docker`, then restart dockerd)"
        )
    return (
        "no nvidia runtime (`docker info`: Runtimes) and no nvidia-container-runtime-hook on dockerd's PATH, one of "
        f"which `--gpus` needs: install nvidia-container-toolkit {where}, then restart dockerd (it looks for the hook "
        "when it starts)"
    )


def choose_request(gpus: DockerGpus, wanted: GpuIds, first: str) -> str | None:
    """The way containers ask this Docker for `wanted`: `first` where it shows that way, else the other way where it
    shows that one, else None (nothing can be asked: the caller refuses, naming `missing` of both ways). A CPU
    container (`none`) asks nothing: `first`, which nothing reads."""
    if wanted == "none" or missing(gpus, first, wanted) is None:
        return first
    other = other_way(first)
    # The other way's CDI only where the daemon lists the devices: one that lists none (before Docker 28.2) may not
    # read CDI at all, and it is not the way the first host's containers were seen to ask.
    if other == "cdi" and gpus.cdi_devices is None:
        return None
    return other if missing(gpus, other, wanted) is None else None


def head_request(gpus: DockerGpus, wanted: GpuIds) -> str | None:
    """The head's (a single host's) way: CDI first, as the seed asks (`--device nvidia.com/gpu=all`), else `--gpus`."""
    return choose_request(gpus, wanted, "cdi")
