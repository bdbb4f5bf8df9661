"""Step payloads: what an executor needs to make one step true, rendered by the planner."""

from __future__ import annotations

from dataclasses import dataclass

from kimik3_reconciler.model.facts import RemoteFile


@dataclass(frozen=True)
class ModelDownload:
    """Fetch these files of repo@revision into the HF cache, then verify their sha256."""

    repo: str
    revision: str
    quant: str
    endpoint: str | None
    cache_dir: str
    files: tuple[RemoteFile, ...]
    missing: tuple[str, ...]
    manifest_key: str

    @property
    def bytes_to_fetch(self) -> int:
        missing = set(self.missing)
        return sum(f.size for f in self.files if f.path in missing)


@dataclass(frozen=True)
class ImageBuild:
    """docker build of Dockerfile.llamacpp for one source pin; `fingerprint` becomes a label."""

    tag: str
    fingerprint: str
    source: str
    commit: str
    dockerfile: str
    archive: str
    archive_sha256: str | None
    patches: tuple[tuple[str, str], ...]  # (context name NN-x.patch, host path)
    build_args: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str], ...]
    retag_from: str | None = None  # an existing image id to tag instead of building


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class ContainerSpec:
    """The rendered container: argv items (never a shell string), env, mounts, GPUs, labels."""

    name: str
    image: str
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    mounts: tuple[Mount, ...]
    gpus: str | tuple[str, ...]  # "none" | "all" | device ids
    labels: tuple[tuple[str, str], ...]
    network_mode: str = "host"
    ipc_mode: str = "host"
    restart_policy: str = "unless-stopped"
    entrypoint: tuple[str, ...] | None = None  # e.g. /app/llama-perplexity for the quant gate


@dataclass(frozen=True)
class SmokeTest:
    """Run a tiny generated kimi-k3 GGUF on a new image with the seed's fixed flags (gate.smoke)."""

    container: str
    image: str
    image_fingerprint: str
    command: tuple[str, ...]  # without --host/--port: the executor picks a free loopback port
    gpus: str | tuple[str, ...]
    labels: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class HealthWait:
    """Wait until llama-server answers /health 200 (model loaded), or fail with its log tail."""

    container: str
    url: str
    timeout_s: float
    model_bytes: int = 0  # recorded with the measured load time: the next plan predicts downtime from it


@dataclass(frozen=True)
class Removal:
    """Remove one thing kimik3 created (container, image or cached model revision)."""

    what: str  # "container" | "image" | "model"
    ref: str
    model: ModelDownload | None = None  # for "model": which cached files to drop
