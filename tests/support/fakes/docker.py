"""FakeDocker: images and containers as `docker inspect` shows them, in memory; `container_inspect` builds one."""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path
from typing import Any

from kimik3_reconciler.errors import PermanentError
from kimik3_reconciler.model.specs import ContainerSpec, ImageBuild
from kimik3_reconciler.ports import LineSink

_ids = itertools.count(1)


def _new_id() -> str:
    return hashlib.sha256(str(next(_ids)).encode()).hexdigest()


def _device_requests(spec: ContainerSpec) -> list[dict[str, Any]] | None:
    """As dockerd stores the adapter's requests: Count -1 for all GPUs, else the device ids."""
    if spec.gpus == "none":
        return None
    if spec.gpus == "all":
        return [{"Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]]}]
    return [{"Count": 0, "DeviceIDs": list(spec.gpus), "Capabilities": [["gpu"]]}]


def container_inspect(
    spec: ContainerSpec, cid: str, image_id: str | None, status: str = "running", image: dict[str, Any] | None = None
) -> dict[str, Any]:
    """docker inspect of a container created from `spec` the way the adapter's run_container creates it
    (dockerd merges the `image`'s Env under the container's, and keeps its Entrypoint unless overridden)."""
    image_config = (image or {}).get("Config") or {}
    env = dict(item.partition("=")[::2] for item in image_config.get("Env") or ())
    env.update(spec.env)
    return {
        "Id": cid,
        "Name": "/" + spec.name,
        "RestartCount": 0,
        "Image": image_id,
        "State": {"Status": status, "ExitCode": 0, "StartedAt": f"t{cid[:6]}"},
        "Config": {
            "Image": spec.image,
            "Labels": dict(spec.labels),
            "Cmd": list(spec.command),
            "Env": [f"{k}={v}" for k, v in env.items()],
            "Entrypoint": list(spec.entrypoint or image_config.get("Entrypoint") or []) or None,
        },
        "HostConfig": {
            "NetworkMode": spec.network_mode,
            "IpcMode": spec.ipc_mode,
            "RestartPolicy": {"Name": spec.restart_policy},
            "DeviceRequests": _device_requests(spec),
        },
        "Mounts": [
            {"Type": "bind", "Source": m.source, "Destination": m.target, "RW": not m.read_only} for m in spec.mounts
        ]
        + [
            {
                "Type": "volume",
                "Name": volume,
                "Source": f"/var/lib/docker/volumes/{volume}/_data",
                "Destination": target,
                "RW": True,
            }
            for volume, target in spec.volumes
        ],
        "spec": spec,
    }


class FakeDocker:
    """Images and containers as docker inspect would show them; `crash_on_start` simulates a bad load."""

    def __init__(self) -> None:
        self.images: dict[str, dict[str, Any]] = {}
        self.containers: dict[str, dict[str, Any]] = {}
        self.volumes: dict[str, dict[str, Any]] = {}  # named volumes, created by a run that mounts them (as Docker)
        self.builds: list[ImageBuild] = []
        self.calls: list[str] = []
        self.crash_on_start = False
        self.base_images: dict[str, str] = {}
        self.base_digests: dict[str, str] = {}  # ref -> the registry digest it was pulled as
        self.perplexity_outputs: dict[str, str] = {}
        self.one_shots: list[ContainerSpec] = []  # every run_to_completion spec, in order
        self.host_gpus = 1  # what `nvidia-smi -L` lists in a container given all GPUs
        self.gpu_probe_error: Exception | None = None  # raised by a GPU probe's start (no device driver)
        self.logs = "srv  llama_server: exiting due to model loading error"

    def info(self) -> dict[str, Any]:
        return {"Runtimes": {"runc": {"path": "runc"}}}

    def list_images(self, label: str) -> list[dict[str, Any]]:
        key, _, value = label.partition("=")  # docker's filter: `key` or `key=value`
        return [
            i
            for i in self.images.values()
            if key in i["Config"]["Labels"] and (not value or i["Config"]["Labels"][key] == value)
        ]

    def build_image(self, spec: ImageBuild, context_files: dict[str, Path], on_line: LineSink) -> str:
        self.calls.append(f"build {spec.tag}")
        self.builds.append(spec)
        for image in self.images.values():  # the tag moves; the old image stays (rollback target)
            image["RepoTags"] = [t for t in image["RepoTags"] if t != spec.tag]
        image_id = "sha256:" + _new_id()
        self.images[image_id] = {"Id": image_id, "RepoTags": [spec.tag], "Config": {"Labels": dict(spec.labels)}}
        on_line("Successfully built")
        return image_id

    def inspect_image(self, ref: str) -> dict[str, Any] | None:
        if ref in self.base_images:  # a pulled base image: its id and, when it came from a registry, its digest
            digest = self.base_digests.get(ref)
            name = ref.split("@")[0]
            repository = name.rpartition(":")[0] if ":" in name.rsplit("/", 1)[-1] else name
            return {
                "Id": self.base_images[ref],
                "RepoTags": [ref],
                "RepoDigests": [f"{repository}@{digest}"] if digest else [],
            }
        image_id = self.image_id(ref)
        return self.images.get(image_id) if image_id else None

    def image_id(self, ref: str) -> str | None:
        if ref in self.base_images:
            return self.base_images[ref]
        return next((k for k, v in self.images.items() if ref in v["RepoTags"]), None)

    def tag_image(self, image_id: str, tag: str) -> None:
        self.calls.append(f"tag {tag}")
        for key, image in self.images.items():
            image["RepoTags"] = [t for t in image["RepoTags"] if t != tag] + ([tag] if key == image_id else [])

    def pull_image(self, ref: str, on_progress: Any = None, on_retry: Any = None) -> str:
        self.calls.append(f"pull {ref}")
        self.base_images[ref] = "sha256:" + _new_id()
        if "@sha256:" in ref:  # pulled by digest: the registry's digest is the pinned one
            self.base_digests[ref] = ref.partition("@")[2]
        return self.base_images[ref]

    def remove_image(self, ref: str) -> None:
        self.calls.append(f"rmi {ref}")
        self.images = {k: v for k, v in self.images.items() if ref not in v["RepoTags"] and k != ref}

    def inspect_container(self, name: str) -> dict[str, Any] | None:
        return self.containers.get(name)

    def list_containers(self, label: str) -> list[dict[str, Any]]:
        return [c for c in self.containers.values() if label in c["Config"]["Labels"]]

    def stop_container(self, name: str) -> None:
        self.calls.append(f"stop {name}")
        self.containers[name]["State"].update(Status="exited", ExitCode=0)

    def run_container(self, spec: ContainerSpec) -> str:
        self.calls.append(f"run {spec.name}")
        cid = _new_id()
        status = "exited" if self.crash_on_start else "running"
        image_id = self.image_id(spec.image)
        self.containers[spec.name] = container_inspect(spec, cid, image_id, status, self.images.get(image_id or ""))
        self.containers[spec.name]["State"]["ExitCode"] = 1 if self.crash_on_start else 0
        for volume, _ in spec.volumes:
            self.volumes.setdefault(volume, {"Name": volume, "Driver": "local"})
        return cid

    def run_to_completion(self, spec: ContainerSpec, timeout_s: float) -> tuple[int, str, str]:
        """A one-shot llama-perplexity: `perplexity_outputs` maps the model arg's quant folder to stdout."""
        self.calls.append(f"oneshot {spec.name}")
        self.one_shots.append(spec)
        if spec.entrypoint == ("nvidia-smi",):  # the GPU probe: lists the GPUs the request gives
            if self.gpu_probe_error is not None:
                raise self.gpu_probe_error
            count = self.host_gpus if spec.gpus == "all" else len(spec.gpus)
            return (
                0,
                "".join(
                    f"GPU {i}: NVIDIA H200 (UUID: GPU-{i:08d}-0000-0000-0000-000000000000)\n" for i in range(count)
                ),
                "",
            )
        model = spec.command[spec.command.index("-m") + 1]
        for quant, out in self.perplexity_outputs.items():
            if f"/{quant}/" in model:
                return 0, out, ""
        base = spec.command[spec.command.index("--kl-divergence-base") + 1]
        host_dir = next(m.source for m in spec.mounts if m.target == "/gate")
        Path(host_dir, base.removeprefix("/gate/")).write_bytes(b"logits")
        return 0, "", ""

    def start_container(self, name: str) -> None:
        self.calls.append(f"start {name}")
        self.containers[name]["State"].update(Status="running", ExitCode=0)

    def remove_container(self, name: str) -> None:
        self.calls.append(f"rm {name}")
        self.containers.pop(name, None)

    def container_logs(self, name: str, tail: int) -> str:
        return self.logs

    def inspect_volume(self, name: str) -> dict[str, Any] | None:
        return self.volumes.get(name)

    def remove_volume(self, name: str) -> None:
        self.calls.append(f"volume rm {name}")
        in_use = [c for c in self.containers.values() if any(m.get("Name") == name for m in c.get("Mounts") or ())]
        if in_use:  # as dockerd: 409 "volume is in use"
            raise PermanentError(f"remove {name}: volume is in use - [{in_use[0]['Id']}]")
        self.volumes.pop(name, None)
