"""The serving container, from one source: `LaunchInput` (model/launch_input.py) holds every value that reaches
its argv, env, mounts, devices, labels and restart policy (seed 000 step 5); `render_container` is a pure
function of it and of the serving engine (which renders the argv: engines/), its fingerprint is the rendered
container's, and its flat form is stamped as a label so that a later plan can name the field that moved
(`flat_diff`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import PurePosixPath
from typing import Any, NamedTuple

from kimik3_reconciler.engines import ServingEngine, engine_for
from kimik3_reconciler.engines.base import EnginePlan, NodeLaunch
from kimik3_reconciler.errors import InputError, PlanError
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.gpu_request import head_request
from kimik3_reconciler.model.hashing import fingerprint
from kimik3_reconciler.model.labels import (
    API_KEY_MOUNT,
    CONTAINER_FINGERPRINT,
    CONTAINER_INPUTS,
    DRAFT_MOUNT,
    HEALTH_URL,
    MODELS_MOUNT,
    PROFILE_LABEL,
    WHILE_LOADING,
)
from kimik3_reconciler.model.launch_input import LaunchInput, ModelInput
from kimik3_reconciler.model.profile import Profile, ServeSpec, gpus_of, upstream_port
from kimik3_reconciler.model.specs import ContainerSpec, Mount, slots_volume
from kimik3_reconciler.planning.cluster_render import head_container
from kimik3_reconciler.planning.worker_step import rpc_endpoints, worker_fingerprints


class WholeOnGpus(NamedTuple):
    """The sizing of an engine whose plan has no mode (vLLM, SGLang): all of the model on the GPUs, nothing derived."""

    mode: str = "all-vram"


NO_QUANT_MODE = WholeOnGpus()


@dataclass(frozen=True)
class Launch:
    """The rendered container, its input and fingerprint, and what the plan should warn about."""

    input: LaunchInput
    spec: ContainerSpec
    fingerprint: str
    warnings: tuple[str, ...]
    mode: Any  # the engine's sizing (EnginePlan.mode: `.mode` is hybrid or all-VRAM on this host's GPUs)
    health_path: str  # answers 200 once the model is loaded (the engine's readiness)
    context: str = ""  # what each request gets (the engine's plan), said where the plan launches
    # A replica over several hosts: each host's processes, the head first (the engine's cluster_launch); () alone.
    cluster: tuple[NodeLaunch, ...] = ()

    @property
    def inputs(self) -> dict[str, Any]:
        return self.input.flat()

    @property
    def health_url(self) -> str:
        return self.input.server_url + self.health_path


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


def repo_dir(cache_dir: str, repo: str) -> str:
    """The HF cache's folder of one repo: `<cache_dir>/models--org--name`."""
    return str(PurePosixPath(cache_dir) / ("models--" + repo.replace("/", "--")))


def gpu_request(observed: Observed, gpus: str | tuple[str, ...]) -> str:
    """How containers ask for `gpus` here, decided as for a cluster node's (model/gpu_request.py): CDI devices where
    the host has CDI with them (the seed's `--device nvidia.com/gpu=all`), else `--gpus` where the nvidia runtime or
    the toolkit's hook gives it; "runtime" when not observed, or when nothing gives GPUs (planning/gpu_probe.py
    refuses that first)."""
    plumbing = observed.gpu_plumbing
    if plumbing is None or gpus == "none":  # not observed, or a CPU container: it asks nothing
        return "runtime"
    return head_request(plumbing, gpus) or "runtime"


def _container_gpus(gpus: str | tuple[int | str, ...]) -> str | tuple[str, ...]:
    return gpus if isinstance(gpus, str) else tuple(str(g) for g in gpus)


def refuse_keyless_key_file(profile: Profile, observed: Observed) -> None:
    """InputError (exit 2) naming serve.api_key_file when llama-server would find no usable key in it
    (observation recorded why, never the key). Only a launch is refused: destroy, status and prune of the
    deployment it protects go on, and verify tries the server as it answers."""
    problem = observed.inputs.api_key_problem
    if profile.serve.api_key_file and problem:
        # rule: api-key-file-holds-a-key
        # An empty key file starts llama-server with no key: the server the profile protects would answer anyone.
        raise InputError(f"serve.api_key_file: {profile.serve.api_key_file} {problem}", (("serve", "api_key_file"),))


def _resolved_serve(profile: Profile, observed: Observed, rendered: EnginePlan) -> ServeSpec:
    """The serve section as the container gets it: the sizing fields of the engine's plan (those of the mode this host
    runs the model in: seed 000 re-tunes per GPU count and memory), and the host paths of its files. An engine whose
    own section holds its batching and context (vllm) sizes none here: it gets the host paths only."""
    serve = profile.serve
    update: dict[str, Any] = {**dict(rendered.serve), "api_key_file": observed.inputs.api_key_file}
    if upstream_port(profile) is not None:  # behind the latency proxy: the proxy holds serve.port
        update["port"] = upstream_port(profile)
    if serve.spec_draft is not None:
        if observed.inputs.draft_model is None:
            raise PlanError(
                "serve.spec_draft: a draft from the hub (repo/file + revision) is not downloaded by "
                "kimik3 yet; give the local path of the draft's weights"
            )
        update["spec_draft"] = serve.spec_draft.model_copy(update={"model": observed.inputs.draft_model})
    return serve.model_copy(update=update)


def launch_input(
    profile: Profile,
    observed: Observed,
    image_tag: str,
    image_fp: str,
    engine: ServingEngine,
    rendered: EnginePlan,
) -> tuple[LaunchInput, tuple[str, ...]]:
    """(the launch input, warnings) from the profile, what this host showed and the engine's plan."""
    bind, warnings = bind_address(profile, observed)
    if upstream_port(profile) is not None:
        # rule: proxy-server-on-loopback
        # Behind the proxy llama-server listens on loopback only: a client reaching it directly would skip the
        # latency series (and the proxy is where serve.host's address is bound).
        bind = "127.0.0.1"
    warnings += rendered.notes
    model = observed.model
    host_gpus = len(observed.host.gpus) if observed.host.gpu_probe == "ok" else None
    value = LaunchInput(
        name=profile.name,
        image=image_tag,
        image_fingerprint=image_fp,
        gpus="none"
        if gpus_of(profile) == "none"
        else (profile.gpus if isinstance(profile.gpus, str) else tuple(profile.gpus)),
        # Under a kimik3 unit systemd is the one supervisor: dockerd restarting it too would start an
        # on-demand deployment at boot, and fight `systemctl stop`.
        restart_policy="no" if profile.systemd is not None else "unless-stopped",
        model=ModelInput(
            repo=model.repo,
            revision=model.revision,
            quant=model.quant,
            cache_dir=model.cache_dir,
            shard=engine.model_entry(model),
            # rule: mmproj-fork-only
            mmproj=profile.model.mmproj if profile.build.source == "fork" else None,
            local_path=model.local_path,
            sha256=model.digest if model.local_path is not None else None,
        ),
        serve=_resolved_serve(profile, observed, rendered),
        bind=bind,
        threads=observed.host.physical_cores,
        draft_device=engine.draft_device(profile, host_gpus),
        gpu_request=gpu_request(observed, gpus_of(profile)),
        rpc=rpc_endpoints(profile),
        worker_fingerprints=worker_fingerprints(profile, image_tag, image_fp),
        knobs=getattr(profile, profile.engine, None),  # the engine's own section (`vllm:`); llama.cpp has none
    )
    names = engine.served_names(value)
    if names != (value.name,):  # an input of its own (issue 38: vLLM's second name), so the plan's diff names it
        value = replace(value, served_names=names)
    return value, warnings


LOCAL_SNAPSHOT = f"{MODELS_MOUNT}/local"  # a local model's files appear under <quant>/ there, as a hub quant's do


def snapshot_path(model: ModelInput) -> str:
    if model.local_path is not None:
        return LOCAL_SNAPSHOT
    return f"{MODELS_MOUNT}/{PurePosixPath(repo_dir(model.cache_dir, model.repo)).name}/snapshots/{model.revision}"


def model_mount(model: ModelInput) -> Mount:
    """The model, read-only: the HF cache's repo folder, or the local file (or folder of shards) in its place."""
    if model.local_path is not None:
        # rule: local-path-verified
        # Read-only like the cache: the server must not be able to change what kimik3 verified.
        inside = f"{LOCAL_SNAPSHOT}/{model.quant}"
        if model.local_path != model.cache_dir:  # one file: mounted alone, not the folder it sits in
            inside += f"/{PurePosixPath(model.local_path).name}"
        return Mount(model.local_path, inside, read_only=True)
    host_root = repo_dir(model.cache_dir, model.repo)
    return Mount(host_root, f"{MODELS_MOUNT}/{PurePosixPath(host_root).name}", read_only=True)


def _mounts(value: LaunchInput) -> tuple[Mount, ...]:
    mounts = [model_mount(value.model)]
    if value.serve.spec_draft is not None:
        draft = value.serve.spec_draft.model
        mounts.append(Mount(draft, f"{DRAFT_MOUNT}/{PurePosixPath(draft).name}", read_only=True))
    if value.serve.api_key_file:
        mounts.append(Mount(value.serve.api_key_file, API_KEY_MOUNT, read_only=True))
    return tuple(mounts)


def _slot_volume(value: LaunchInput, engine: ServingEngine) -> tuple[tuple[str, str], ...]:
    # A named volume, not a host folder: Docker creates it on the server's host (also one reached over ssh://),
    # root-only under its data root, and keeps it when the container is replaced, as an rpc-server's tensor cache.
    if not value.serve.slot_save or engine.slot_store is None:
        return ()
    return ((slots_volume(value.name), engine.slot_store.mount),)


def render_container(value: LaunchInput, engine: ServingEngine) -> ContainerSpec:
    """The container, labels aside: a pure function of the launch input (the engine renders the argv)."""
    return ContainerSpec(
        name=value.name,
        image=value.image,
        command=engine.server_argv(value, snapshot_path(value.model)),
        env=tuple(sorted({**value.serve.env, **dict(engine.server_env(value))}.items())),
        mounts=_mounts(value),
        volumes=_slot_volume(value, engine),
        gpus=_container_gpus(value.gpus),
        labels=(),
        restart_policy=value.restart_policy,
        gpu_request=value.gpu_request,
    )


def container_fingerprint(
    spec: ContainerSpec, image_fp: str, workers: tuple[str, ...] = (), model_sha256: str | None = None
) -> str:
    """The rendered container (labels aside) and its image's inputs: what a running container is compared by;
    a local model's content digest too (its mount's path says nothing of what the file holds)."""
    hashed = {
        k: v
        for k, v in asdict(replace(spec, labels=())).items()
        if not (k == "entrypoint" and v is None) and not (k == "volumes" and not v) and k != "gpu_request"
    }
    # (a field added with its default must not change the fingerprint of every running container; how the
    # GPUs are requested, CDI or the runtime, is the host's plumbing, not what runs: a host that gains CDI
    # must not reload a 17-minute model for it)
    return fingerprint(
        {
            "spec": hashed,
            "image": image_fp,
            **({"workers": list(workers)} if workers else {}),
            **({"model": model_sha256} if model_sha256 else {}),
        }
    )


def served_note(engine: ServingEngine, names: tuple[str, ...]) -> str:
    """What a client may send as `model`, as the plan and `status` say it."""
    anyway = f" (and any other name: {engine.server} does not check it)" if engine.answers_any_name else ""
    return f"answers to model {' or '.join(names)}{anyway}"


def served_names_in(argv: tuple[str, ...], flag: str) -> tuple[str, ...]:
    """The names a running container's argv gives after `flag` (up to the next flag): what it really serves, also
    when an older kimik3 launched it."""
    if flag not in argv:
        return ()
    after = argv[argv.index(flag) + 1 :]
    return tuple(a for a in after[: next((i for i, a in enumerate(after) if a.startswith("-")), len(after))])


def render_launch(
    profile: Profile,
    observed: Observed,
    image_tag: str,
    image_fp: str,
    engine: ServingEngine | None = None,
    rendered: EnginePlan | None = None,
) -> Launch:
    """The launch on this host; `engine`: the profile's serving engine and `rendered` its plan (render_desired hands
    both in, the plan rendered once; other callers get the engine the profile names and its plan rendered here)."""
    engine = engine or engine_for(profile.engine)
    rendered = rendered if rendered is not None else engine.render_plan(profile, observed)
    value, warnings = launch_input(profile, observed, image_tag, image_fp, engine, rendered)
    spec = render_container(value, engine)
    cluster = engine.cluster_launch(value, snapshot_path(value.model))
    if cluster:  # the head runs what the engine renders for it (vLLM: Ray's head, then the server)
        spec = head_container(spec, cluster[0])
    digest = container_fingerprint(spec, image_fp, value.worker_fingerprints, value.model.sha256)
    labels = (
        (PROFILE_LABEL, value.name),
        (CONTAINER_FINGERPRINT, digest),
        (CONTAINER_INPUTS, json.dumps(value.flat(), sort_keys=True)),
        (HEALTH_URL, value.server_url + engine.readiness.path),
        *(((WHILE_LOADING, engine.readiness.while_loading),) if engine.readiness.while_loading != "503" else ()),
    )
    # Slots sharing -c is the engine's plan to say; a checkpoint engine's context is its own knob (vllm.max_model_len):
    # its plan says the names a client may send instead (issue 38: seed 001's examples send the repo id).
    context = rendered.context or served_note(engine, engine.served_names(value))
    mode = rendered.mode if rendered.mode is not None else NO_QUANT_MODE
    return Launch(value, replace(spec, labels=labels), digest, warnings, mode, engine.readiness.path, context, cluster)
