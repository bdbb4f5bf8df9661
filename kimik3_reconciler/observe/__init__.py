"""Observation: one collector per source, composed into the Observed value the planner reads."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.model.facts import ModelFact, Observed
from kimik3_reconciler.model.helpers import EXPORTER, FRONT
from kimik3_reconciler.model.model_files import CHECKPOINT
from kimik3_reconciler.model.profile import Profile, bind_addresses, listened_ports
from kimik3_reconciler.model.records import (
    LOAD_RATE_KEY,
    WARM_LOAD_RATE_KEY,
    build_time_key,
    gate_key,
    last_good_key,
    load_key,
    unverified_key,
)
from kimik3_reconciler.model.specs import slots_volume
from kimik3_reconciler.observe.checkpoint_config import collect_checkpoint_config
from kimik3_reconciler.observe.cluster import collect_members, collect_ray, collect_removed_members
from kimik3_reconciler.observe.docker_objects import (
    collect_base_images,
    collect_container,
    collect_gpu_plumbing,
    collect_gpu_probe,
    collect_images,
    collect_others,
    collect_runtime_cuda,
)
from kimik3_reconciler.observe.helper import collect_helper
from kimik3_reconciler.observe.host import collect_host
from kimik3_reconciler.observe.host_settings import collect_host_settings
from kimik3_reconciler.observe.local_inputs import collect_inputs
from kimik3_reconciler.observe.local_model import collect_local_model
from kimik3_reconciler.observe.model_cache import collect_checkpoint, collect_model, collect_tokenizer, model_cache_dir
from kimik3_reconciler.observe.model_layout import collect_layout
from kimik3_reconciler.observe.pulled_image import collect_pulled
from kimik3_reconciler.observe.unit import collect_systemd
from kimik3_reconciler.observe.workers import collect_removed_workers, collect_workers
from kimik3_reconciler.ports import Ports

__all__ = ["observe"]


def observe(
    profile: Profile,
    ports: Ports,
    base_dir: Path,
    dockerfile: Path,
    rehash: bool = False,
    gate_reference: Profile | None = None,
    before_hub: Callable[[Observed], object] | None = None,
    stat_only: bool = False,
) -> Observed:
    """What the planner may look at. `rehash`: re-hash the cached model files (`--verify`); `stat_only`
    (`kimik3 status`): never hash, a file whose stat moved is only reported `changed`;
    `gate_reference`: the quant gate's reference profile, whose files are observed too (planning says when);
    `before_hub`: called with the host-side facts (no model files yet) before any hub request (the host gate)."""
    # lscpu (a process) and NVML (a library to load) answer while dockerd does.
    host_ahead = _Ahead(lambda: (ports.host.lscpu_parseable(), ports.host.nvml()))
    # Inspected once: the container fact also tells the host collector which GPU process is ours.
    # Relative to the profile's folder, as observe/local_model.py resolves it: a crash's advice names that file.
    local_model = str((base_dir / profile.model.local_path).resolve()) if profile.model.local_path is not None else None
    signs = engine_for(profile.engine).log_signs  # what the server's log says of a crash
    container = collect_container(ports.docker, ports.http, profile.name, signs, local_model)
    if container is not None and container.pid:  # the pre-read weighs what the serving process holds
        container = container.model_copy(update={"rss_bytes": ports.host.process_rss(container.pid)})
    # dockerd answers a label-filtered image list and an image inspect by name in ~20 ms each where it keeps
    # many images, and the other profiles' containers take a list and an inspect each: asked now, on other
    # connections, while the rest is observed (the daemon answered above).
    engine = engine_for(profile.engine)
    # An engine that pulls its image (vLLM, SGLang) has no base images to look at: its image is one digest.
    pulls = engine.image_source.kind == "pull"
    base_refs = () if pulls else (profile.build.base_images.build, profile.build.base_images.runtime)
    images_ahead = _Ahead(
        lambda: (collect_images(ports.docker, ports.state), collect_base_images(ports.docker, base_refs))
    )
    others_ahead = _Ahead(lambda: collect_others(ports.docker, profile.name))
    ours = frozenset({container.pid}) if container is not None and container.pid else frozenset()
    # Whether Docker can give containers GPUs (`docker info`) matters only to a profile that asks for GPUs.
    gpu = profile.build.variant == "cuda" and profile.gpus != "none"
    lscpu, nvml = host_ahead.result()
    host = collect_host(
        ports.host,
        ports.docker if gpu else None,
        ours,
        listened_ports(profile),
        lscpu,
        nvml,
        binds=tuple(dict.fromkeys(address for _, address in bind_addresses(profile))),
    )
    inputs = collect_inputs(profile, base_dir, dockerfile, ports.state, rehash, ports.cache)
    # Before the gate: our exporter's proxy may hold serve.port (metrics.proxy), which the gate must not refuse.
    exporter = collect_helper(EXPORTER, profile.name, ports.state, ports.processes, ports.http)
    # The front (metrics.handover) holds serve.port the same way.
    front = collect_helper(FRONT, profile.name, ports.state, ports.processes, ports.http)
    others = others_ahead.result()
    m = profile.model
    if before_hub is not None:  # a host the gate refuses must not wait for the hub first
        before_hub(
            Observed(
                host=host,
                inputs=inputs,
                container=container,
                others=others,
                exporter=exporter,
                front=front,
                model=ModelFact(repo=m.repo, revision=m.revision, quant=m.quant or CHECKPOINT, cache_dir=""),
            )
        )
    checkpoint = engine.model_source.format == "safetensors"
    if profile.model.local_path is not None:  # a GGUF made on this host: nothing of the hub is asked
        model = collect_local_model(profile, ports.state, ports.cache, base_dir, ports.host, rehash, stat_only)
    elif checkpoint:
        model = collect_checkpoint(
            m.repo,
            m.revision,
            m.endpoint,
            model_cache_dir(profile, ports.hub, base_dir),
            ports.hub,
            ports.state,
            ports.host,
            rehash,
            stat_only,
        )
    else:
        model = collect_model(profile, ports.hub, ports.state, base_dir, ports.host, rehash, stat_only)
    gated = gate_reference is not None
    reference = (
        collect_model(gate_reference, ports.hub, ports.state, base_dir, ports.host, rehash, stat_only)
        if gate_reference is not None
        else None
    )
    # The layout is read from GGUF headers; a checkpoint has none (its engine places it by TP/DP sizes).
    layout, layout_recorded = (
        (None, False) if checkpoint else collect_layout(profile, ports.hub, ports.state, model, engine)
    )
    # GPU plumbing only for a profile that asks for GPUs: the CPU variant never probes.
    plumbing = collect_gpu_plumbing(ports.docker, ports.host) if gpu else None
    # The probe record is per GPU set (planning/gpu_probe.py asks for these docker device ids).
    probed = "all" if profile.gpus == "all" else tuple(str(g) for g in profile.gpus)
    images, (base_ids, base_digests) = images_ahead.result()
    return Observed(
        gpu_plumbing=plumbing,
        gpu_probe_record=(
            collect_gpu_probe(ports.state, plumbing, host.driver_version, probed, len(host.gpus)) if plumbing else None
        ),
        reference=reference,
        gate_records=(ports.state.read(gate_key(model.repo, model.revision, model.quant)) or {}) if gated else {},
        host=host,
        inputs=inputs,
        model=model,
        layout=layout,
        layout_recorded=layout_recorded,
        tokenizer=collect_tokenizer(
            profile,
            ports.hub,
            ports.state,
            base_dir,
            ports.host,
            rehash,
            hub_down=model.listing_error,
            stat_only=stat_only,
        ),
        images=images,
        base_images=base_ids,
        base_digests=base_digests,
        runtime_cuda=collect_runtime_cuda(ports.docker, profile.build.base_images.runtime)
        if profile.build.variant == "cuda" and not pulls
        else None,
        pulled=collect_pulled(profile.image.ref, ports.docker, None if stat_only else ports.registry)
        if pulls
        else None,
        container=container,
        others=others,
        # By its name, not by the profile's serve.slot_save: a volume an earlier launch made outlives turning it off.
        slots_volume=ports.docker.inspect_volume(slots_volume(profile.name)) is not None,
        load_rate=_load_rate(ports, LOAD_RATE_KEY),
        warm_load_rate=_load_rate(ports, WARM_LOAD_RATE_KEY),
        last_load=_load_record(ports, load_key(profile.name)),
        # The heads tensor parallelism splits: read before any pull (status reads no hub for it).
        checkpoint_config=(
            collect_checkpoint_config(profile, ports.hub, model) if checkpoint and not stat_only else None
        ),
        build_time=_build_seconds(ports, build_time_key(profile.build.variant, cached=False)),
        cached_build_time=_build_seconds(ports, build_time_key(profile.build.variant, cached=True)),
        last_good=(ports.state.read(last_good_key(profile.name)) or {}).get("date"),
        unverified=(ports.state.read(unverified_key(profile.name)) or {}).get("fingerprint"),
        systemd=collect_systemd(profile, ports.units, ports.processes),
        workers=collect_workers(profile, ports.worker_docker, ports.docker, ports.host, ports.state, inputs),
        removed_workers=collect_removed_workers(profile, ports.worker_docker, ports.state),
        members=collect_members(profile, ports.worker_docker),
        removed_members=collect_removed_members(profile, ports.worker_docker, ports.state),
        **dict(zip(("ray_alive", "ray_error"), collect_ray(profile, ports.docker, container), strict=True)),
        exporter=exporter,
        host_settings=collect_host_settings(profile, ports.units),
        front=front,
    )


class _Ahead:
    """A read started now, its answer (or its exception) taken later: waits on dockerd overlap other work."""

    def __init__(self, read: Callable[[], Any]):
        self._answer: Any = None
        self._error: BaseException | None = None
        # daemon: a plan refused before it takes the answer (the host gate) does not wait for it to exit
        self._thread = threading.Thread(target=self._run, args=(read,), name="kimik3-observe-ahead", daemon=True)
        self._thread.start()

    def _run(self, read: Callable[[], Any]) -> None:
        try:
            self._answer = read()
        except BaseException as exc:  # re-raised in the observing thread, where it would have been raised
            self._error = exc

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._answer


def _build_seconds(ports: Ports, key: str) -> float | None:
    """Seconds of the last image build recorded here; None when none was, or the record is not a number (edited,
    another version): the plan then states its default."""
    seconds = (ports.state.read(key) or {}).get("seconds")
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or not 0 <= seconds < float("inf"):
        return None
    return float(seconds)


def _load_record(ports: Ports, key: str) -> tuple[int, float] | None:
    """(bytes, seconds) of a load recorded here; None when none was, or the record is not numbers (edited, another
    version): the plan then predicts as on a first load."""
    record = ports.state.read(key) or {}
    size, seconds = record.get("bytes"), record.get("seconds")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and v > 0 for v in (size, seconds)):
        return None
    return int(size), float(seconds)


def _load_rate(ports: Ports, key: str) -> float | None:
    """Bytes a second of the last load measured here; None when none was (the plan predicts from seed 000's rate)."""
    record = _load_record(ports, key)
    return None if record is None else record[0] / record[1]
