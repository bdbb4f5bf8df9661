"""What reaches the serving container, as one value: `LaunchInput` holds every value its argv, env, mounts,
devices, labels and restart policy are rendered from (planning/launch.py renders it; the serving engine,
engines/, renders the argv from it). `flat()` names its fields as the profile does: the `kimik3.inputs` label.
"""

from __future__ import annotations

import ipaddress
from dataclasses import asdict, dataclass
from typing import Any

from kimik3_reconciler.model.engine_names import own_fields
from kimik3_reconciler.model.profile import ServeSpec

# Knobs added after containers were labelled: in the label only where set, so a single-host vLLM/SGLang container an
# older kimik3 launched does not diff (and relaunch) on a field it never had.
LABELLED_WHEN_SET = frozenset({"cluster", "pipeline_parallel_size", "pp_size"})


@dataclass(frozen=True)
class ModelInput:
    """The quant as the container opens it: the cache folder it mounts and the shard it loads."""

    repo: str
    revision: str
    quant: str | None  # llama.cpp's GGUF quant folder; None for a safetensors checkpoint (vllm)
    cache_dir: str
    shard: str  # the -00001-of- shard, relative to the snapshot (".": the checkpoint folder itself)
    mmproj: str | None  # fork only: mainline would error or silently ignore --mmproj
    # `model.local_path` as resolved (a file or a folder), mounted read-only in place of the HF cache's repo
    # folder, and the sha256 digest of its verified content (a changed file relaunches the server). Both None for
    # a hub quant: left out of `flat()` and of the fingerprint, so those stay as they were.
    local_path: str | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class LaunchInput:
    """Everything the container is made from; nothing else reaches `render_container`."""

    name: str
    image: str
    image_fingerprint: str
    gpus: str | tuple[int | str, ...]  # as the profile declares them ("none" for the CPU variant)
    restart_policy: str
    model: ModelInput
    serve: ServeSpec  # the profile's section, with the effective batch/ubatch/fit_target and host paths resolved
    bind: str
    threads: int  # physical cores, not hardware threads (seed 000)
    draft_device: str | None
    gpu_request: str = "runtime"  # CDI or the nvidia runtime (planning/gpu_probe.py); not in `flat()`
    rpc: tuple[str, ...] = ()  # the workers' rpc-server endpoints (--rpc), in profile order
    worker_fingerprints: tuple[str, ...] = ()  # theirs: a worker that changes replaces this server too
    knobs: Any = None  # the engine's own section of the profile (`vllm:`), None for llama.cpp
    # The model names served beyond `name` (vLLM: and model.repo), in the label only where set: llama.cpp's and
    # SGLang's labels stay as they were, and a vLLM container an older kimik3 launched diffs on it.
    served_names: tuple[str, ...] = ()

    def flat(self) -> dict[str, Any]:
        """{field: value}, named as the profile names them (`serve.ubatch`, `model.cache_dir`); the label.
        The shard's file name is left out: a function of repo@revision/quant, it would only repeat them."""
        flat: dict[str, Any] = {f"serve.{k}": v for k, v in self.serve.model_dump(mode="json").items()}
        if not self.serve.slot_save:  # only where set: every label written before the field stays as it was
            flat.pop("serve.slot_save", None)
        flat.update(
            {
                f"model.{k}": v
                for k, v in asdict(self.model).items()
                if k != "shard" and not (k in ("local_path", "sha256") and v is None)
            }
        )
        if self.knobs is not None:  # an engine with its own section reads no other engine's own fields: not its inputs
            for path in own_fields():
                flat.pop(".".join(path), None)
        flat.update(
            {
                "name": self.name,
                "gpus": self.gpus if isinstance(self.gpus, str) else list(self.gpus),
                "image": self.image,
                "image.fingerprint": self.image_fingerprint,
                "host.bind": self.bind,
                "host.threads": self.threads,
                "host.draft_device": self.draft_device,
                "restart_policy": self.restart_policy,
            }
        )
        if self.knobs is not None:  # only for an engine with a section of its own: llama.cpp's label stays as it was
            knobs = self.knobs.model_dump(mode="json")
            flat.update(
                {f"{self.knobs_section}.{k}": v for k, v in knobs.items() if not (k in LABELLED_WHEN_SET and v is None)}
            )
        if self.served_names:
            flat["served_names"] = list(self.served_names)
        if self.rpc:  # only with workers: a single-host label stays as it was
            flat.update({"rpc.endpoints": list(self.rpc), "rpc.worker_fingerprints": list(self.worker_fingerprints)})
        return flat

    @property
    def knobs_section(self) -> str:
        """The profile section the knobs come from (`vllm`), by its class: VllmSpec -> vllm."""
        return type(self.knobs).__name__.removesuffix("Spec").lower()

    @property
    def server_url(self) -> str:
        """Where the server answers from this host (a wildcard bind is probed on loopback)."""
        return f"http://{_probe_host(self.bind)}:{self.serve.port}"


def _probe_host(bind: str) -> str:
    address = ipaddress.ip_address(bind)
    if address.is_unspecified:
        return "127.0.0.1" if address.version == 4 else "[::1]"
    return f"[{bind}]" if address.version == 6 else bind
