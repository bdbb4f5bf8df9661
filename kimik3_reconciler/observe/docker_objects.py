"""Images and the profile's container, from docker's inspect JSON (pure parsers + collectors)."""

from __future__ import annotations

import json
import re
from typing import Any

from kimik3_reconciler.engines.base import LogSigns
from kimik3_reconciler.model.facts import ContainerFact, DockerGpus, GpuPlumbing, ImageFact, MountFact, RunningConfig
from kimik3_reconciler.model.gpu_request import head_request
from kimik3_reconciler.model.labels import (
    CONTAINER_FINGERPRINT,
    CONTAINER_INPUTS,
    HEALTH_URL,
    IMAGE_FINGERPRINT,
    PROFILE_LABEL,
    WHILE_LOADING,
)
from kimik3_reconciler.model.records import gpu_probe_key, smoke_key
from kimik3_reconciler.observe.server_log import crash_cause
from kimik3_reconciler.ports import DockerPort, HostPort, HttpPort, StatePort


def parse_image(attrs: dict[str, Any]) -> ImageFact:
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    return ImageFact(
        id=attrs["Id"],
        tags=tuple(attrs.get("RepoTags") or ()),
        fingerprint=labels.get(IMAGE_FINGERPRINT),
        labels=dict(labels),
    )


# dockerd puts this PATH into a container's Config.Env when its image sets none.
CRASH_LOG_TAIL = 200  # read only for a container that exited with an error
DOCKER_DEFAULT_ENV = (("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),)


def _env_pairs(env: list[str] | None) -> dict[str, str]:
    return dict(item.partition("=")[::2] for item in env or ())


CDI_GPU = "nvidia.com/gpu"  # the CDI kind nvidia-container-toolkit generates (`nvidia-ctk cdi generate`)


def parse_gpus(device_requests: list[dict[str, Any]] | None) -> str | tuple[str, ...]:
    """HostConfig.DeviceRequests as `ContainerSpec.gpus`: "none", "all" (Count -1, or the CDI device
    nvidia.com/gpu=all) or device ids (the CDI names' part after `=`): the same GPUs however requested."""
    requests = device_requests or ()
    runtime = [r for r in requests if ["gpu"] in (r.get("Capabilities") or [])]
    cdi = [
        d.partition("=")[2]
        for r in requests
        if r.get("Driver") == "cdi"
        for d in r.get("DeviceIDs") or ()
        if d.startswith(CDI_GPU + "=")
    ]
    if not runtime and not cdi:
        return "none"
    if any(r.get("Count") == -1 for r in runtime) or "all" in cdi:
        return "all"
    return tuple(str(d) for r in runtime for d in r.get("DeviceIDs") or ()) + tuple(cdi)


def parse_cdi_kind(text: str) -> str | None:
    """The `kind` of a CDI spec file (YAML or JSON): nvidia.com/gpu for the toolkit's."""
    found = re.search(r'(?:^|[{,\s])"?kind"?\s*:\s*"?([^"\s,}]+)', text, re.M)
    return found.group(1) if found else None


def parse_toolkit_version(text: str) -> str | None:
    """`nvidia-ctk --version` ("NVIDIA Container Toolkit CLI version 1.17.4") or `nvidia-container-cli
    --version` ("cli-version: 1.17.4") -> "1.17.4"."""
    found = re.search(r"version[:\s]+v?(\d+\.\d+[\w.+-]*)", text)
    return found.group(1) if found else None


def _daemon_reads_cdi(info: dict[str, Any]) -> bool:
    """Docker >= 27 lists CDISpecDirs (empty: CDI turned off); older daemons say nothing: 25 and 26 read
    CDI specs when the feature is on, before 25 never (the probe settles what this cannot)."""
    if "CDISpecDirs" in info:
        return bool(info.get("CDISpecDirs"))
    major = str(info.get("ServerVersion") or "0").split(".")[0]
    return major.isdigit() and int(major) >= 25


def parse_gpu_plumbing(info: dict[str, Any], cdi_specs: dict[str, str], toolkit: str, hook: bool) -> GpuPlumbing:
    """The head's GPU plumbing: what its docker info says (as a node's), the CDI spec files (path -> text), the
    toolkit's --version output and whether dockerd's PATH has the toolkit's hook (`HostPort.runtime_hook`)."""
    gpu_specs = tuple(sorted(path for path, text in cdi_specs.items() if parse_cdi_kind(text) == CDI_GPU))
    api = parse_docker_gpus(info)
    # A daemon that lists no devices (before 28.2): a spec of the kind is what there is to go on; none is no device.
    devices = api.cdi_devices if api.cdi_devices is not None else None if gpu_specs else ()
    return GpuPlumbing(
        runtime=api.runtime,
        hook=hook,
        reads_cdi=api.reads_cdi,
        cdi_devices=devices,
        toolkit_version=parse_toolkit_version(toolkit),
        cdi_specs=gpu_specs,
    )


def _lists_devices(info: dict[str, Any]) -> bool:
    """Docker 28.2+ (API 1.50) lists the devices its drivers found (DiscoveredDevices)."""
    found = re.match(r"(\d+)\.(\d+)", str(info.get("ServerVersion") or ""))
    return found is not None and (int(found[1]), int(found[2])) >= (28, 2)


def parse_docker_gpus(info: dict[str, Any]) -> DockerGpus:
    """A Docker's GPU plumbing as its `docker info` says it (a cluster node's: its files are out of reach)."""
    listed = info.get("DiscoveredDevices")
    if listed is None and _lists_devices(info):
        # moby's field is `json:",omitempty"`: a daemon that lists devices and found none sends no field, not [].
        listed = []
    devices = (
        tuple(
            sorted(d["ID"] for d in listed if d.get("Source") == "cdi" and str(d.get("ID")).startswith(CDI_GPU + "="))
        )
        if isinstance(listed, list)
        else None
    )
    return DockerGpus(
        runtime="nvidia" in (info.get("Runtimes") or {}), reads_cdi=_daemon_reads_cdi(info), cdi_devices=devices
    )


def collect_gpu_plumbing(docker: DockerPort, host: HostPort, toolkit: bool = True) -> GpuPlumbing:
    specs = {path: host.cdi_spec_text(path) for path in host.cdi_specs()}
    version = host.container_toolkit_version() if toolkit else ""
    return parse_gpu_plumbing(docker.info(), specs, version, host.runtime_hook())


def docker_gives_gpus(docker: DockerPort, host: HostPort) -> bool:
    """Docker can give containers GPUs here one way or the other (HostFacts.docker_gpus): the decision the GPU probe
    and a cluster node's check make (model/gpu_request.py), for all GPUs; the toolkit's version is not needed."""
    return head_request(collect_gpu_plumbing(docker, host, toolkit=False), "all") is not None


def collect_gpu_probe(
    state: StatePort, plumbing: GpuPlumbing, driver: str | None, gpus: str | tuple[str, ...], host_gpus: int
) -> dict[str, Any] | None:
    """The passing probe record of this (driver, toolkit, request, GPUs), if any."""
    request = head_request(plumbing, gpus)
    if request is None:
        return None
    record = state.read(gpu_probe_key(driver, plumbing.toolkit_version, request, gpus, host_gpus))
    return record if record and record.get("passed") else None


def parse_running(inspect: dict[str, Any], image: dict[str, Any] | None = None) -> RunningConfig:
    """The container's real config (argv, env, mounts, GPUs, modes) from its inspect JSON and its image's
    (`image`: the image's inspect JSON, whose Env and Entrypoint docker merged into the container's)."""
    config, host = inspect.get("Config") or {}, inspect.get("HostConfig") or {}
    image_config = (image or {}).get("Config") or {}
    image_env = _env_pairs(image_config.get("Env"))
    defaults = {**dict(DOCKER_DEFAULT_ENV), **image_env}
    env = _env_pairs(config.get("Env"))
    entrypoint = tuple(config.get("Entrypoint") or ())
    # Anonymous volumes for the image's VOLUMEs are docker's doing, not a launch choice.
    image_volumes = set(image_config.get("Volumes") or ())
    mounts = tuple(
        sorted(
            (
                MountFact(
                    # A named volume by its name (what a spec's `volumes` names), not its folder under Docker's root.
                    source=m.get("Name", "") if m.get("Type") == "volume" else m.get("Source", ""),
                    target=m.get("Destination", ""),
                    read_only=not m.get("RW", True),
                )
                for m in inspect.get("Mounts") or ()
                if not (m.get("Type") == "volume" and m.get("Destination") in image_volumes)
            ),
            key=lambda m: m.target,
        )
    )
    return RunningConfig(
        image=config.get("Image", ""),
        command=tuple(config.get("Cmd") or ()),
        entrypoint=None
        if entrypoint == tuple(image_config.get("Entrypoint") or ())
        else entrypoint,  # None: the image's
        image_entrypoint=tuple(image_config.get("Entrypoint") or ()),
        env=tuple(sorted((k, v) for k, v in env.items() if defaults.get(k) != v)),
        defaults=tuple(sorted(defaults.items())),
        mounts=mounts,
        gpus=parse_gpus(host.get("DeviceRequests")),
        network_mode=host.get("NetworkMode", ""),
        ipc_mode=host.get("IpcMode", ""),
        restart_policy=((host.get("RestartPolicy") or {}).get("Name") or "no"),
    )


def parse_container(inspect: dict[str, Any], image: dict[str, Any] | None = None) -> ContainerFact:
    labels = (inspect.get("Config") or {}).get("Labels") or {}
    state = inspect.get("State") or {}
    try:
        inputs = json.loads(labels.get(CONTAINER_INPUTS, "{}"))
    except json.JSONDecodeError:
        inputs = {}  # hand-edited label: the fingerprint mismatch will replace the container
    return ContainerFact(
        id=inspect["Id"],
        name=inspect.get("Name", "").lstrip("/"),
        state=state.get("Status", "dead"),
        image=(inspect.get("Config") or {}).get("Image", ""),
        image_id=inspect.get("Image"),
        fingerprint=labels.get(CONTAINER_FINGERPRINT),
        inputs=inputs,
        started_at=state.get("StartedAt"),
        exit_code=state.get("ExitCode") if state.get("Status") == "exited" else None,
        restart_count=inspect.get("RestartCount", 0),
        profile=labels.get(PROFILE_LABEL),
        pid=state.get("Pid") or None,
        running=parse_running(inspect, image),
    )


def parse_labelled_container(inspect: dict[str, Any], fingerprint: str, inputs: str) -> ContainerFact:
    """A container launched through another host's Docker (an RPC worker's rpc-server, a cluster node's member): its
    fingerprint and inputs under that kind's own labels."""
    labels = (inspect.get("Config") or {}).get("Labels") or {}
    return parse_container(inspect).model_copy(
        update={"fingerprint": labels.get(fingerprint), "inputs": json.loads(labels.get(inputs) or "{}")}
    )


def collect_images(docker: DockerPort, state: StatePort) -> tuple[ImageFact, ...]:
    facts = []
    for attrs in docker.list_images(label=IMAGE_FINGERPRINT):
        fact = parse_image(attrs)
        record = state.read(smoke_key(fact.fingerprint)) if fact.fingerprint else None
        if record:
            fact = fact.model_copy(
                update={"smoke": "passed" if record.get("passed") else "failed", "smoke_detail": record.get("detail")}
            )
        facts.append(fact)
    return tuple(facts)


def repository(ref: str) -> str:
    """nvidia/cuda:13.0.0-devel-ubuntu24.04@sha256:… -> nvidia/cuda (a registry's :port is kept)."""
    name = ref.split("@")[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def _normal(repo: str) -> str:
    """Docker Hub's short names and their long form are one repository."""
    for prefix in ("docker.io/library/", "docker.io/", "index.docker.io/library/", "index.docker.io/"):
        if repo.startswith(prefix):
            return repo.removeprefix(prefix)
    return repo.removeprefix("library/")


def parse_repo_digest(ref: str, inspect: dict[str, Any] | None) -> str | None:
    """The digest (sha256:…) under which `ref`'s repository knows the local image (its RepoDigests): what
    the tag pointed to when it was pulled. None for an image that never came from a registry (docker import)."""
    wanted = _normal(repository(ref))
    for entry in (inspect or {}).get("RepoDigests") or ():
        name, _, digest = entry.partition("@")
        if _normal(name) == wanted and digest.startswith("sha256:"):
            return digest
    return None


BaseIds = dict[str, str | None]


def collect_base_images(docker: DockerPort, refs: tuple[str, ...]) -> tuple[BaseIds, BaseIds]:
    """Local ids of the build's base images (None = not pulled yet: the build pulls it), and their repo digests."""
    ids, digests = {}, {}
    for ref in dict.fromkeys(refs):
        inspect = docker.inspect_image(ref)
        ids[ref], digests[ref] = (inspect or {}).get("Id"), parse_repo_digest(ref, inspect)
    return ids, digests


def image_env(inspect: dict | None, name: str) -> str | None:
    """One variable of an image's Config.Env (docker inspect), or None."""
    for item in ((inspect or {}).get("Config") or {}).get("Env") or ():
        key, _, value = item.partition("=")
        if key == name:
            return value
    return None


def collect_runtime_cuda(docker: DockerPort, ref: str) -> str | None:
    """CUDA_VERSION of the runtime base image, when it is pulled (nvidia/cuda images set it): the driver
    floor follows it; None = not pulled yet (the tag's version stands in)."""
    return image_env(docker.inspect_image(ref), "CUDA_VERSION")


def collect_container(
    docker: DockerPort, http: HttpPort, name: str, signs: LogSigns, local_model: str | None = None
) -> ContainerFact | None:
    """The serving container as it is; `signs`: its engine's log signs and `local_model` (model.local_path, if any)
    name a crash's cause and advice."""
    inspect = docker.inspect_container(name)
    if inspect is None:
        return None
    # The image's own Env/Entrypoint are what docker merged into the container's: not a drift.
    image = docker.inspect_image(inspect["Image"]) if inspect.get("Image") else None
    fact = parse_container(inspect, image)
    state = inspect.get("State") or {}
    if fact.state in ("exited", "dead", "restarting") and state.get("ExitCode"):
        # A crashed server's log names the cause and its fix (a CUDA OOM needs more fit_target, not a restart).
        cause = crash_cause(
            bool(state.get("OOMKilled")), docker.container_logs(name, CRASH_LOG_TAIL), signs, local_model
        )
        fact = fact.model_copy(update={"crash": cause})
    labels = (inspect.get("Config") or {}).get("Labels") or {}
    url = labels.get(HEALTH_URL)
    if fact.state == "running" and url:
        # The container says where it listens (label stamped at launch), so no profile math here.
        health = http.health(url)
        if health == "unreachable" and labels.get(WHILE_LOADING) == "refused":
            health = "loading"  # vLLM binds its port once loaded: a running container that refuses is loading
        fact = fact.model_copy(update={"health": health})
    return fact


def collect_others(docker: DockerPort, name: str) -> tuple[ContainerFact, ...]:
    """Other profiles' serving containers (not smoke tests): they may hold the same GPUs or port."""
    facts = (parse_container(i) for i in docker.list_containers(label=CONTAINER_FINGERPRINT))
    return tuple(f for f in facts if f.name != name)
