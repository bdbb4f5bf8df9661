"""In-memory fakes of the ports, for planner and engine unit tests only (real parts: realparts.py)."""

from __future__ import annotations

import copy
import datetime
import hashlib
import itertools
import json
import shutil
import struct
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kimik3_reconciler.errors import DownloadFailed, PermanentError
from kimik3_reconciler.model.facts import RemoteFile
from kimik3_reconciler.model.specs import ContainerSpec, ImageBuild, ModelDownload
from kimik3_reconciler.ports import LineSink, Ports

_ids = itertools.count(1)

# The profile the engine unit tests start from: CPU variant, no GPUs, a local archive, no smoke test.
FAKE_REVISION = "ab" * 20
FAKE_PROFILE = f"""
apiVersion: kimik3/v1
name: k3-test
model: {{repo: org/k3, revision: {FAKE_REVISION}, quant: UD-Q2_K_XL}}
build: {{source: mainline, variant: cpu, cpu_features: [], archive: src.tar.gz}}
gpus: none
serve: {{port: 18999, ctx_size: 4096, parallel: 2}}
gate: {{smoke: false}}
"""


def _new_id() -> str:
    return hashlib.sha256(str(next(_ids)).encode()).hexdigest()


def _device_requests(spec: ContainerSpec) -> list[dict[str, Any]] | None:
    """As dockerd stores the adapter's requests: Count -1 for all GPUs, else the device ids."""
    if spec.gpus == "none":
        return None
    if spec.gpus == "all":
        return [{"Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]]}]
    return [{"Count": 0, "DeviceIDs": list(spec.gpus), "Capabilities": [["gpu"]]}]


def container_inspect(spec: ContainerSpec, cid: str, image_id: str | None, status: str = "running",
                      image: dict[str, Any] | None = None) -> dict[str, Any]:
    """docker inspect of a container created from `spec` the way the adapter's run_container creates it
    (dockerd merges the `image`'s Env under the container's, and keeps its Entrypoint unless overridden)."""
    image_config = (image or {}).get("Config") or {}
    env = dict(item.partition("=")[::2] for item in image_config.get("Env") or ())
    env.update(spec.env)
    return {
        "Id": cid, "Name": "/" + spec.name, "RestartCount": 0, "Image": image_id,
        "State": {"Status": status, "ExitCode": 0, "StartedAt": f"t{cid[:6]}"},
        "Config": {"Image": spec.image, "Labels": dict(spec.labels), "Cmd": list(spec.command),
                   "Env": [f"{k}={v}" for k, v in env.items()],
                   "Entrypoint": list(spec.entrypoint or image_config.get("Entrypoint") or []) or None},
        "HostConfig": {"NetworkMode": spec.network_mode, "IpcMode": spec.ipc_mode,
                       "RestartPolicy": {"Name": spec.restart_policy}, "DeviceRequests": _device_requests(spec)},
        "Mounts": [{"Type": "bind", "Source": m.source, "Destination": m.target, "RW": not m.read_only}
                   for m in spec.mounts],
        "spec": spec,
    }


class FakeDocker:
    """Images and containers as docker inspect would show them; `crash_on_start` simulates a bad load."""

    def __init__(self) -> None:
        self.images: dict[str, dict[str, Any]] = {}
        self.containers: dict[str, dict[str, Any]] = {}
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
        return [i for i in self.images.values() if label in i["Config"]["Labels"]]

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
            return {"Id": self.base_images[ref], "RepoTags": [ref],
                    "RepoDigests": [f"{ref.split('@')[0].rpartition(':')[0] or ref}@{digest}"] if digest else []}
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

    def pull_image(self, ref: str) -> str:
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
        return cid

    def run_to_completion(self, spec: ContainerSpec, timeout_s: float) -> tuple[int, str, str]:
        """A one-shot llama-perplexity: `perplexity_outputs` maps the model arg's quant folder to stdout."""
        self.calls.append(f"oneshot {spec.name}")
        self.one_shots.append(spec)
        if spec.entrypoint == ("nvidia-smi",):  # the GPU probe: lists the GPUs the request gives
            if self.gpu_probe_error is not None:
                raise self.gpu_probe_error
            count = self.host_gpus if spec.gpus == "all" else len(spec.gpus)
            return 0, "".join(f"GPU {i}: NVIDIA H200 (UUID: GPU-{i:08d}-0000-0000-0000-000000000000)\n"
                              for i in range(count)), ""
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


class FakeHub:
    """A hub with one repo@revision; its "cache" is a plain folder (path in repo -> file) under `root`."""

    def __init__(self, repo: str, revision: str, files: dict[str, bytes], root: Path):
        self.repo, self.revision, self.files, self.root = repo, revision, files, root
        self.listings = 0
        self.downloads: list[tuple[str, ...]] = []
        self.corrupt: set[str] = set()

    def default_cache_dir(self) -> str:
        return str(self.root)

    def repo_cache_dir(self, repo: str, cache_dir: str) -> Path:
        return Path(cache_dir) / ("models--" + repo.replace("/", "--"))

    def list_files(self, repo: str, revision: str, paths: Iterable[str], endpoint: str | None) -> list[RemoteFile]:
        self.listings += 1
        if (repo, revision) != (self.repo, self.revision):
            raise DownloadFailed(f"{repo}@{revision}: not found")
        wanted = tuple(paths)
        return [RemoteFile(path=p, size=len(b), sha256=hashlib.sha256(b).hexdigest())
                for p, b in sorted(self.files.items()) if any(p == w or p.startswith(w + "/") for w in wanted)]

    def list_repo(self, repo: str, revision: str, endpoint: str | None) -> list[RemoteFile]:
        return self.list_files(repo, revision, {p.split("/")[0] for p in self.files}, endpoint)

    def read_head(self, repo: str, revision: str, path: str, endpoint: str | None, nbytes: int) -> bytes:
        return self.files[path][:nbytes]

    def remove_cached(self, repo: str, revision: str, path: str, cache_dir: str) -> None:
        (self.root / "cache" / path).unlink(missing_ok=True)

    def cached_file(self, repo: str, revision: str, path: str, cache_dir: str) -> Path | None:
        cached = self.root / "cache" / path
        return cached if cached.is_file() else None

    def download(self, spec: ModelDownload, on_progress: Callable[[str, int, int], None]) -> int:
        """Like the real one: a file whose bytes don't hash to the listing is refused, never cached."""
        self.downloads.append(spec.missing)
        for path in spec.missing:
            if path in self.corrupt:
                raise DownloadFailed(f"{path}: sha256 mismatch with the hub's; removed, run apply again")
            target = self.root / "cache" / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self.files[path])
        return sum(len(self.files[path]) for path in spec.missing)


class FakeHttp:
    def __init__(self, docker: FakeDocker):
        self.docker = docker
        self.loading_polls = 1  # answers 503 this many times after a launch, then 200

    def health(self, url: str) -> str:
        if not any(c["State"]["Status"] == "running" for c in self.docker.containers.values()):
            return "unreachable"
        if self.loading_polls > 0:
            self.loading_polls -= 1
            return "loading"
        return "ok"

    def fetch(self, url: str, dest: Path) -> str:
        raise AssertionError("unit tests use local archives")

    def chat(self, base_url: str, model: str, prompt: str, api_key: str | None) -> str:
        return "fake"

    def free_port(self) -> int:
        return 18999


class FakeHost:
    def __init__(self, cores: int = 8, flags: str = "avx2 avx512f"):
        self.cores, self.flags = cores, flags
        self.free_bytes = 1 << 40
        self.nvml_dump: dict[str, Any] = {"error": "NVMLError_LibraryNotFound: NVML Shared Library Not Found"}
        self.numa: str | None = "0\n"
        self.tcp_text, self.owners = "", {}  # /proc/net/tcp{,6} and inode -> (pid, program): nothing listens
        self.mount_text = "/dev/nvme0n1p2 / ext4 rw,relatime 0 0\n"  # /proc/self/mounts: one local root
        self.cdi: dict[str, str] = {}  # CDI spec path -> text
        self.toolkit = ""  # `nvidia-ctk --version` output
        self.proc: dict[tuple[int, str], str] = {}  # (pid, "io" | "status") -> the /proc file's text
        self.cached: set[str] = set()  # paths the fake page cache holds (pre-read)
        self.preread_calls: list[tuple[list[str], int]] = []

    def lscpu_parseable(self) -> str:
        return "\n".join(f"{c},0" for c in range(self.cores))

    def cpuinfo(self) -> str:
        return f"flags\t\t: {self.flags}\n"

    def tailscale_ipv4(self) -> str | None:
        return None

    def disk_free(self, path: str) -> int:
        return self.free_bytes

    def mounts(self) -> str:
        return self.mount_text

    def real_path(self, path: str) -> str:
        return path

    def nvml(self) -> dict[str, Any]:
        return self.nvml_dump

    def meminfo(self) -> str:
        return "MemTotal:       24683584 kB\nMemAvailable:   23311316 kB\n"

    def numa_balancing(self) -> str | None:
        return self.numa

    def numa_nodes(self) -> int:
        return 1

    def cdi_specs(self) -> list[str]:
        return list(self.cdi)

    def cdi_spec_text(self, path: str) -> str:
        return self.cdi.get(path, "")

    def container_toolkit_version(self) -> str:
        return self.toolkit

    def tcp_tables(self) -> str:
        return self.tcp_text

    def socket_owners(self, inodes: set[int], likely: frozenset[int] = frozenset()) -> dict[int, tuple[int, str]]:
        return {inode: owner for inode, owner in self.owners.items() if inode in inodes}

    def process_file(self, pid: int, name: str) -> str:
        return self.proc.get((pid, name), "")

    def preread(self, paths: list[str], workers: int, on_bytes: Callable[[int], None]) -> None:
        self.preread_calls.append((list(paths), workers))
        for path in paths:
            self.cached.add(path)
            on_bytes(Path(path).stat().st_size if Path(path).exists() else 0)

    def resident_bytes(self, paths: list[str]) -> int:
        return sum(Path(p).stat().st_size for p in paths if p in self.cached and Path(p).exists())


class MemoryState:
    """Records in memory; artifacts are files under a real temporary root."""

    def __init__(self, root: Path | None = None) -> None:
        self.records: dict[str, dict[str, Any]] = {}
        self.root = root

    def read(self, key: str) -> dict[str, Any] | None:
        return self.records.get(key)

    def write(self, key: str, value: dict[str, Any]) -> None:
        self.records[key] = value

    def delete(self, key: str) -> None:
        self.records.pop(key, None)

    def _file(self, key: str) -> Path:
        if self.root is None:
            raise AssertionError("this test keeps no files")
        return self.root / key

    def artifact(self, key: str) -> Path | None:
        path = self._file(key)
        return path if path.exists() else None

    def produce(self, key: str, make: Callable[[Path], None]) -> Path:
        path = self._file(key)
        if path.exists():
            return path  # as the real adapter: made once per key
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(path.name + ".partial")
        try:
            make(staging)
            staging.rename(path)
        finally:
            shutil.rmtree(staging, ignore_errors=True) if staging.is_dir() else staging.unlink(missing_ok=True)
        return path

    def discard(self, key: str) -> None:
        path = self._file(key)
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds

    def now(self) -> datetime.datetime:
        return datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=self.t)


def fake_ports(hub: FakeHub, cores: int = 8) -> tuple[Ports, FakeDocker]:
    docker = FakeDocker()
    return Ports(docker=docker, hub=hub, http=FakeHttp(docker), host=FakeHost(cores),
                 state=MemoryState(hub.root / "state"), clock=FakeClock(), chat=FakeChat(docker),
                 units=FakeUnits(docker)), docker


def gguf_bytes(metadata: dict[str, str]) -> bytes:
    """A GGUF v3 file with string metadata and no tensors: all that verify reads of a shard (model/weights.py)."""
    def text(value: str) -> bytes:
        return struct.pack("<Q", len(value.encode())) + value.encode()

    body = b"".join(text(k) + struct.pack("<I", 8) + text(v) for k, v in metadata.items())
    return b"GGUF" + struct.pack("<IQQ", 3, 0, len(metadata)) + body


class FakeChat:
    """llama-server's chat API: serves the `--alias` of running containers, answers scripted replies.

    `replies` are consumed in order (then "fake" text; an exception in the list is raised by its turn);
    every request is kept in `requests`, copied as sent; `error` is raised by every call when set.
    """

    def __init__(self, docker: FakeDocker):
        self.docker = docker
        self.replies: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.templated: list[list[dict[str, Any]]] = []
        self.dropped: set[str] = set()  # message fields the fake template leaves out
        self.error: Exception | None = None

    @staticmethod
    def reply(content: str | None = "fake", reasoning: str | None = None,
              tool_calls: list[dict[str, Any]] | None = None, finish: str = "stop") -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        if tool_calls is not None:
            message["tool_calls"] = tool_calls
        return {"message": message, "finish_reason": finish}

    @staticmethod
    def tool_call(arguments: str, name: str = "get_weather", call_id: str = "call_1") -> dict[str, Any]:
        return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}

    def models(self, base_url: str, api_key: str | None) -> dict[str, Any]:
        if self.error:
            raise self.error
        names = [c["spec"].command[c["spec"].command.index("--alias") + 1] for c in self.docker.containers.values()
                 if c["State"]["Status"] == "running" and "--alias" in c["spec"].command]
        return {"object": "list", "data": [{"id": n, "aliases": [n], "object": "model"} for n in names]}

    def chat(self, base_url: str, api_key: str | None, messages: list[dict[str, Any]],
             tools: list[dict[str, Any]] | None = None, max_tokens: int = 32,
             thinking_effort: str | None = None) -> dict[str, Any]:
        self.requests.append(copy.deepcopy({"base_url": base_url, "api_key": api_key, "messages": messages,
                                            "tools": tools, "max_tokens": max_tokens,
                                            "thinking_effort": thinking_effort}))
        if self.error:
            raise self.error
        reply = self.replies.pop(0) if self.replies else self.reply()
        if isinstance(reply, Exception):
            raise reply
        return copy.deepcopy(reply)

    def apply_template(self, base_url: str, api_key: str | None, messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]] | None = None) -> str:
        """Every message as JSON, as a template that keeps everything would; `dropped` fields left out."""
        self.templated.append(copy.deepcopy(messages))
        if self.error:
            raise self.error
        return "\n".join(json.dumps({k: v for k, v in m.items() if k not in self.dropped}) for m in messages)


class FakeUnits:
    """systemd as `systemctl show` reports it, files in a dict; a started unit runs its env file's container.

    Like the real unit (`docker start --attach`), an active unit whose container stopped reads as
    inactive; `start` stops the units its `Conflicts=` names (and those naming it), as systemd does.
    """

    def __init__(self, docker: FakeDocker, booted: bool = True, docker_cli: str | None = "/usr/bin/docker"):
        self.docker, self.is_booted, self.docker_cli = docker, booted, docker_cli
        self.has_docker_service = True
        self.packaged: dict[str, str] = {}  # units loaded from elsewhere, e.g. /lib/systemd/system
        self.files: dict[str, str] = {}
        self.loaded: set[str] = set()
        self.state: dict[str, dict[str, str]] = {}
        self.calls: list[str] = []

    def booted(self) -> bool:
        return self.is_booted

    def system_state(self) -> str:
        return "running" if self.is_booted else "offline"

    def which(self, program: str) -> str | None:
        return self.docker_cli if program == "docker" else None

    def list_files(self, directory: str, suffix: str) -> list[str]:
        return sorted(p for p in self.files if p.rsplit("/", 1)[0] == directory and p.endswith(suffix))

    def read_file(self, path: str) -> str | None:
        return self.files.get(path)

    def write_file(self, path: str, text: str) -> None:
        self.calls.append(f"write {path}")
        self.files[path] = text

    def remove_file(self, path: str) -> None:
        self.calls.append(f"rm {path}")
        self.files.pop(path, None)

    def _setting(self, path: str, key: str) -> str:
        lines = (self.files.get(path) or "").splitlines()
        return next((ln.split("=", 1)[1].strip('"') for ln in lines if ln.startswith(key + "=")), "")

    def _container(self, unit: str) -> str:
        return self._setting(f"/etc/kimik3/{unit.removesuffix('.service')}.env", "KIMIK3_CONTAINER")

    def _unit_state(self, unit: str) -> dict[str, str]:
        state = self.state.setdefault(unit, {"ActiveState": "inactive", "SubState": "dead", "Result": "success",
                                             "UnitFileState": ""})
        container = self.docker.containers.get(state.get("container", ""))  # read at start, like EnvironmentFile
        if state["ActiveState"] == "active" and (container is None or container["State"]["Status"] != "running"):
            state.update(ActiveState="inactive", SubState="dead")  # `docker start --attach` returned
        return state

    def show(self, units: list[str], properties: list[str]) -> str:
        blocks = []
        for unit in units:
            state = self._unit_state(unit)
            docker_unit = unit == "docker.service" and self.has_docker_service
            loaded = "loaded" if unit in self.loaded or unit in self.packaged or docker_unit else "not-found"
            fragment = f"/etc/systemd/system/{unit}" if unit in self.loaded else self.packaged.get(unit, "")
            values = {"Id": unit, "LoadState": loaded, "FragmentPath": fragment, **state}
            blocks.append("\n".join(f"{p}={values.get(p, '')}" for p in properties))
        return "\n\n".join(blocks) + "\n"

    def systemctl(self, *args: str) -> None:
        self.calls.append("systemctl " + " ".join(args))
        verb, units = args[0], args[1:]
        if verb == "daemon-reload":
            self.loaded = {p.rsplit("/", 1)[1] for p in self.list_files("/etc/systemd/system", ".service")}
        for unit in units:
            if verb in ("start", "enable") and unit not in self.loaded:
                raise PermanentError(f"Unit {unit} not found.")
            state = self._unit_state(unit)
            if verb in ("enable", "disable"):
                state["UnitFileState"] = verb + "d"
            elif verb == "start":
                self._start(unit, state)
            elif verb == "stop" and state["ActiveState"] == "active":
                self.docker.stop_container(state["container"])
                state.update(ActiveState="inactive", SubState="dead")
            elif verb == "reset-failed" and state["ActiveState"] == "failed":
                state.update(ActiveState="inactive", Result="success")

    def _start(self, unit: str, state: dict[str, str]) -> None:
        if state["ActiveState"] == "active":
            return
        mine = set(self._setting(f"/etc/systemd/system/{unit}", "Conflicts").split())
        for other in list(self.state):
            theirs = set(self._setting(f"/etc/systemd/system/{other}", "Conflicts").split())
            if other != unit and (other in mine or unit in theirs):
                self.systemctl("stop", other)
        state["container"] = self._container(unit)
        container = self.docker.containers.get(state["container"])
        if container is None:  # `docker start --attach` of a missing container exits 1
            state.update(ActiveState="failed", SubState="failed", Result="exit-code")
            return
        if container["State"]["Status"] != "running":
            self.docker.start_container(state["container"])
        state.update(ActiveState="active", SubState="running", Result="success")

