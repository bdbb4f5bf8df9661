"""Render the llama-server container from the profile: seed 000 step 5's argv, mounts, GPUs, labels."""

from __future__ import annotations

import ipaddress
import json
from dataclasses import asdict, dataclass, replace
from pathlib import PurePosixPath

from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.facts import ModelFact, Observed
from kimik3_reconciler.model.hashing import fingerprint
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.specs import ContainerSpec, Mount
from kimik3_reconciler.model.labels import (
    API_KEY_MOUNT,
    CONTAINER_FINGERPRINT,
    CONTAINER_INPUTS,
    DRAFT_MOUNT,
    HEALTH_URL,
    MODELS_MOUNT,
    PROFILE_LABEL,
)

# Seed 000 "Runtime requirements that are NOT tunable": leaving any out measured as a
# 20+-minute single-request stall or a crash, so they are fixed, not knobs.
# rule: fixed-flags, kv-types-equal
FIXED_FLAGS = ("--numa", "distribute", "--cache-type-k", "f16", "--cache-type-v", "f16", "--load-mode", "none")


@dataclass(frozen=True)
class Launch:
    """The rendered container plus the flattened inputs that explain its fingerprint."""

    spec: ContainerSpec
    fingerprint: str
    inputs: dict[str, object]
    health_url: str
    warnings: tuple[str, ...]


def bind_address(profile: Profile, observed: Observed) -> tuple[str, tuple[str, ...]]:
    host = profile.serve.host
    if host == "loopback":
        return "127.0.0.1", ()
    if host == "tailscale":
        if observed.host.tailscale_ipv4:
            return observed.host.tailscale_ipv4, ()
        # Seed 000: bind the tailnet address, fall back to loopback-only if Tailscale isn't up.
        return "127.0.0.1", ("serve.host: tailscale is not up on this host; binding 127.0.0.1 only",)
    return host, ()


def _probe_host(bind: str) -> str:
    address = ipaddress.ip_address(bind)
    if address.is_unspecified:
        return "127.0.0.1" if address.version == 4 else "[::1]"
    return f"[{bind}]" if address.version == 6 else bind


def first_shard(model: ModelFact) -> str:
    """The file llama-server opens: the -00001-of- shard, or the quant folder's only GGUF."""
    ggufs = sorted(f.path for f in model.files if f.path.startswith(model.quant + "/") and f.path.endswith(".gguf"))
    firsts = [p for p in ggufs if "-00001-of-" in p]
    return (firsts or ggufs or [f"{model.quant}/<unknown>.gguf"])[0]


def _model_root(model: ModelFact) -> tuple[str, str]:
    """(host folder models--org--name, path of the snapshot inside the container)."""
    repo_dir = "models--" + model.repo.replace("/", "--")
    host = str(PurePosixPath(model.cache_dir) / repo_dir)
    return host, f"{MODELS_MOUNT}/{repo_dir}/snapshots/{model.revision}"


def _placement_args(profile: Profile) -> tuple[str, ...]:
    serve = profile.serve
    if serve.n_cpu_moe is not None:
        # A deterministic split instead of --fit's live choice (seed 000 "Tuning --n-cpu-moe").
        return ("--fit", "off", "-ngl", "999", "--n-cpu-moe", str(serve.n_cpu_moe))
    targets = serve.fit_target if isinstance(serve.fit_target, list) else [serve.fit_target]
    return ("--fit", "on", "--fit-target", ",".join(str(t) for t in targets))


def _argv(profile: Profile, observed: Observed, bind: str, snapshot: str) -> tuple[str, ...]:
    serve = profile.serve
    threads = str(observed.host.physical_cores)
    argv: list[str] = [
        "-m", f"{snapshot}/{first_shard(observed.model)}",
        "--host", bind, "--port", str(serve.port),
        "--alias", profile.name,
        *FIXED_FLAGS,
        # threads = physical cores, not hardware threads (seed 000).
        "--threads", threads, "--threads-batch", threads,
        "--batch-size", str(serve.batch), "--ubatch-size", str(profile.effective_ubatch),
        "--ctx-size", str(serve.ctx_size), "--parallel", str(serve.parallel),
        *_placement_args(profile),
        "--metrics", "--log-colors", "off",
    ]
    if serve.cache_ram is not None:
        argv += ["--cache-ram", str(serve.cache_ram)]
    if serve.api_key_file:
        # The key stays in a read-only mounted file: never in argv, env or docker inspect.
        argv += ["--api-key-file", API_KEY_MOUNT]
    argv += _draft_args(profile, observed)
    if profile.build.source == "fork" and profile.model.mmproj:
        # Vision lives only in the fork; mainline would error or silently ignore --mmproj.
        argv += ["--mmproj", f"{snapshot}/{profile.model.mmproj}"]
    return (*argv, *serve.extra_args)


def draft_device(profile: Profile, host_gpus: int | None = None) -> str | None:
    """The draft's device: the GPU holding the target's output.weight, i.e. the last of the layer
    split (seed 000: anywhere else aborts in graph reservation). Containers see their GPUs as
    CUDA0..CUDA(n-1) in `gpus` order; with `gpus: all` the host's GPU count (NVML) says n."""
    draft = profile.serve.spec_draft
    if draft is None or gpus_of(profile) == "none":
        return None
    if draft.device != "auto":
        return draft.device
    # rule: spec-draft-device
    if isinstance(profile.gpus, list):
        return f"CUDA{len(profile.gpus) - 1}"
    if host_gpus:
        return f"CUDA{host_gpus - 1}"
    raise PlanError("serve.spec_draft.device: auto needs the GPU count; with gpus: all list the GPUs or name the "
                    "device (CUDA<n>, the last GPU of the split)")


def _draft_args(profile: Profile, observed: Observed) -> list[str]:
    draft = profile.serve.spec_draft
    if draft is None:
        return []
    if observed.inputs.draft_model is None:
        raise PlanError("serve.spec_draft: a draft from the hub (repo/file + revision) is not downloaded by kimik3 "
                        "yet; give a local GGUF path")
    args = ["--spec-draft-model", f"{DRAFT_MOUNT}/{PurePosixPath(observed.inputs.draft_model).name}",
            "--spec-type", draft.type]
    device = draft_device(profile, len(observed.host.gpus) if observed.host.gpu_probe == "ok" else None)
    return args + (["--spec-draft-device", device] if device else [])


def gpus_of(profile: Profile) -> str | tuple[str, ...]:
    if profile.build.variant == "cpu" or profile.gpus == "none":
        return "none"
    if profile.gpus == "all":
        return "all"
    return tuple(str(g) for g in profile.gpus)


def container_inputs(profile: Profile, observed: Observed, image_tag: str, image_fp: str, bind: str) -> dict[str, object]:
    """Flattened profile fields (and derived host values) the container is made from."""
    inputs: dict[str, object] = {f"serve.{k}": v for k, v in profile.serve.model_dump(mode="json").items()}
    inputs.update({
        "name": profile.name,
        "gpus": profile.gpus if isinstance(profile.gpus, str) else list(profile.gpus),
        "model.repo": profile.model.repo,
        "model.revision": profile.model.revision,
        "model.quant": profile.model.quant,
        "model.mmproj": profile.model.mmproj if profile.build.source == "fork" else None,
        "image": image_tag,
        "image.fingerprint": image_fp,
        "serve.ubatch": profile.effective_ubatch,
        "host.bind": bind,
        "host.threads": observed.host.physical_cores,
        "restart_policy": "no" if profile.systemd is not None else "unless-stopped",
    })
    return inputs


def render_launch(profile: Profile, observed: Observed, image_tag: str, image_fp: str) -> Launch:
    bind, warnings = bind_address(profile, observed)
    host_root, snapshot = _model_root(observed.model)
    mounts = [Mount(host_root, f"{MODELS_MOUNT}/{PurePosixPath(host_root).name}", read_only=True)]
    if observed.inputs.draft_model:
        name = PurePosixPath(observed.inputs.draft_model).name
        mounts.append(Mount(observed.inputs.draft_model, f"{DRAFT_MOUNT}/{name}", read_only=True))
    if observed.inputs.api_key_file:
        mounts.append(Mount(observed.inputs.api_key_file, API_KEY_MOUNT, read_only=True))
    spec = ContainerSpec(
        name=profile.name,
        image=image_tag,
        command=_argv(profile, observed, bind, snapshot),
        env=tuple(sorted(profile.serve.env.items())),
        mounts=tuple(mounts),
        gpus=gpus_of(profile),
        labels=(),
        # Under a kimik3 unit systemd is the one supervisor: dockerd restarting it too would start an
        # on-demand deployment at boot, and fight `systemctl stop`.
        restart_policy="no" if profile.systemd is not None else "unless-stopped",
    )
    inputs = container_inputs(profile, observed, image_tag, image_fp, bind)
    hashed = {k: v for k, v in asdict(spec).items() if not (k == "entrypoint" and v is None)}
    # (a field added with its default must not change the fingerprint of every running container)
    digest = fingerprint({"spec": hashed, "image": image_fp})
    url = f"http://{_probe_host(bind)}:{profile.serve.port}/health"
    labels = (
        (PROFILE_LABEL, profile.name),
        (CONTAINER_FINGERPRINT, digest),
        (CONTAINER_INPUTS, json.dumps(inputs, sort_keys=True)),
        (HEALTH_URL, url),
    )
    return Launch(replace(spec, labels=labels), digest, inputs, url, warnings)
