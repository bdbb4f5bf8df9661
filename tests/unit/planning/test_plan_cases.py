"""Planner tests as data: tests/cases/plan/*.yaml hold a profile, observed facts, expected steps.

A case describes observed state the way it arises: `previous` is the profile (a patch over the
case's base) that an earlier apply converged to, so the observed image and container carry the
labels that apply would have stamped. The planner itself renders them; no fingerprints are
written by hand.

    description: why this case exists
    base: |                 # optional; default tests/cases/plan/_base.yaml (or a base file's name: _base-vllm-tp8.yaml)
    desired: {patch}        # the profile being planned = base + patch
    previous: {patch}       # what the last apply made (default: same as base); null = nothing
    observed:
      model: complete | absent | {missing: [file, ...], edited: [...], touched: [...], corrupt: [...]}
                              # edited: stat moved, re-hashed, sha256 mismatch; touched: stat moved, sha256
                              # matches; corrupt: sha256 mismatch found by --verify (no stat moved)
      image: previous | absent
      pulled: present | absent | {absent: why}               # an engine that pulls its image (vllm): the digest
                                                              #   here (default), absent (12 GiB to pull), size unknown
      smoke: passed | failed | null                           # the previous image's smoke record
      built_on: {ref: id}   base_images: {ref: id}            # base image ids at build time / now
      built_on_digests: {ref: digest}   base_digests: {ref: digest}  # their repo digests at build time / now
      container: {state: running, health: ok} | absent      # made from `previous` (also: exit_code, pid, rss_gib,
                                                              #   log: a tests/fixtures file, its last lines)
        drift: {argv: {flag: value}, env: {K: V}, writable: true, restart_policy: x}  # then changed by hand
      unverified: true                                        # an apply launched it and never verified it
      host: {physical_cores: 8, cpu_flags: [...], tailscale_ipv4: null}
            # or {recorded: h200, gpus: 8, ram_total: ...}: the recorded H200 host (tests/support/recorded_hosts.py)
            # or {described: seed-000, ram_total: ...}: seed 000's 8x RTX PRO 6000 host as the seed describes it
            # or {described: described-b300.yaml, numa_balancing: 0, ...}: a described host (tests/fixtures/host,
            #   model/described_host.py, `kimik3 routes --host-facts`), the fields replaced
      quant_gib: 662                                          # the quant's size (default: two 40 GiB shards)
      cache_mounts: proc-self-mounts.nfs-models.txt           # tests/fixtures/host: the cache dir's mount from it
      previous_host: {...}                                    # the host the previous apply saw
      patches: {name: content-tag}                            # local patch file contents (a multi-line
                                                              # value is the patch's diff text, parsed)
      systemd: {booted: true, unit: absent | installed | edited, enabled: bool, active: active,
                exporter_unit: absent | installed | edited,       # <unit>-metrics.service `previous` installed
                front_unit: absent | installed}                   # <unit>-front.service (metrics.handover)
      gpu_plumbing: {reads_cdi: true, runtime: false, hook: false, cdi_devices: [nvidia.com/gpu=all],  # GpuPlumbing
                     toolkit_version: 1.17.4}   # (default: not observed); cdi_devices unset: the daemon lists none
      gpu_probe: {date: ..., seen: ...}                       # the passing probe record of this plumbing
      workers: {name: {image: previous | absent, container: {state: running, restarted: true} | absent,
                       port_open: true, listeners: [addr], same_daemon: false, error: "ssh: ...",
                       mem_total: bytes, devices: [[CPU, total_bytes, free_bytes]]}}
                              # each of the desired profile's rpc workers, as `previous` launched it (default)
      removed_workers: {name: {container: absent, error: "ssh: ..."}}
      members: {name: {image: absent, container: {state: exited, exit_code: 1} | absent, error: "ssh: ...",
                       ray: dead,    # each of a cluster's nodes, as `previous` launched it (default: running, alive
                                     # in Ray's table, read through the head's running container: vllm)
                       docker_gpus: {runtime: false, reads_cdi: true, cdi_devices: [nvidia.com/gpu=0]}}}
                                     # its Docker's GPU plumbing (DockerGpus; default: not read, never refused)
                              # `previous`'s workers the desired profile no longer names (recorded, running by default)
      removed_members: {name: {container: absent, error: "ssh: ..."}}  # `previous`'s cluster nodes, as removed_workers
      host_settings: {file: absent | written | "text", live: {kernel.numa_balancing: "1"},  # host.prepare's file
                      overridden_by: [[path, key, value]]}     # later sysctl.d files setting its keys otherwise
      build_times: {compile: seconds, cached: seconds}        # host/build-time-<variant>[-cached] records
      loads: {rate: {bytes: n, seconds: s}, container: {seconds: s, bytes: n}}  # host/load-rate.json and
                                                              # load/<name>.json (bytes: the model's by default)
      local: verified | unverified | edited | touched   # model.local_path's file (a name), since `previous`
      front: serving | silent | dead                          # the front (metrics.handover) `previous` started (pid 4343)
      exporter: serving | silent | dead                       # the metrics exporter `previous` started (pid 4242):
                                                              # answering /healthz, running but silent, pid gone
                                                              # the unit `previous` installed (edited: by hand)
    expect:
      - [kind, action, reason substring, [diff lines, * wildcards allowed]]
    warnings: [substring, ...]
    costs: {kind: [substring, ...]}  # the step of that kind states each in its cost
    routes: [substring, ...]  # each in a line of the plan's routes (planning/routes.py: "yes llamacpp ...")
    refuses: substring      # instead of expect: the planner raises PlanError saying this
    local_files: {name: gguf | text | folder}   # written in a temporary folder (the profile's), and
    refuses_input: substring                    # the real local-model collector refuses model.local_path so
"""

from __future__ import annotations

import copy
import fnmatch
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.fakes import FakeHost, MemoryState, container_inspect
from support.observed import local_inputs, model_fact, observed, shard_files
from support.recorded_hosts import recorded_host

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.engines.llamacpp.image import render_image_build
from kimik3_reconciler.errors import InputError, PlanError
from kimik3_reconciler.model.described_host import described_host
from kimik3_reconciler.model.engine_names import ENGINES
from kimik3_reconciler.model.facts import (
    ContainerFact,
    DockerGpus,
    ExporterFact,
    GpuPlumbing,
    HostFacts,
    HostSettingsFact,
    ImageFact,
    MemberFact,
    ModelFact,
    Observed,
    PatchFact,
    PulledImageFact,
    RemoteFile,
    RemovedWorkerFact,
    RpcDeviceFact,
    SystemdFacts,
    UnitFact,
    WorkerFact,
    manifest_digest,
)
from kimik3_reconciler.model.host_settings import sysctl_text
from kimik3_reconciler.model.labels import MEMBER_INPUTS
from kimik3_reconciler.model.model_files import CHECKPOINT
from kimik3_reconciler.model.profile import Profile
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.model.specs import ContainerSpec
from kimik3_reconciler.observe.docker_objects import parse_running
from kimik3_reconciler.observe.host import parse_mount_of
from kimik3_reconciler.observe.local_inputs import parse_unified_diff
from kimik3_reconciler.observe.local_model import collect_local_model
from kimik3_reconciler.observe.server_log import crash_cause
from kimik3_reconciler.observe.unit import parse_unit_file
from kimik3_reconciler.planning import plan, render_desired
from kimik3_reconciler.planning.cluster_render import rendered_members
from kimik3_reconciler.planning.exporter_unit import render_exporter_install
from kimik3_reconciler.planning.front_step import render_front
from kimik3_reconciler.planning.front_unit import plan_front_unit
from kimik3_reconciler.planning.launch import render_launch
from kimik3_reconciler.planning.metrics_step import render_exporter
from kimik3_reconciler.planning.unit_step import render_install
from kimik3_reconciler.planning.worker_step import render_worker, worker_inputs

CASES = Path(__file__).parents[2] / "cases" / "plan"
FIXTURES = Path(__file__).parents[2] / "fixtures"
HOST_FIXTURES = FIXTURES / "host"
BASE = yaml.safe_load((CASES / "_base.yaml").read_text())


def merge(base: dict[str, Any], patch: dict[str, Any] | None) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in (patch or {}).items():
        out[key] = (
            merge(out.get(key, {}), value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


def profile_of(data: dict[str, Any]) -> Profile:
    return parse_profile(yaml.safe_dump(data), "case.yaml").profile


def checkpoint_engine(profile: Profile) -> bool:
    """Does the profile's engine serve a safetensors checkpoint (vllm, sglang) rather than a GGUF quant?"""
    return engine_for(profile.engine).model_source.format == "safetensors"


def model_files(profile: Profile, quant_gib: float = 80) -> tuple[RemoteFile, ...]:
    if checkpoint_engine(profile):  # the checkpoint's top-level shards, index and config (quant_gib: its weights)
        return tuple(
            RemoteFile(
                path=f"model-{i:05d}-of-00002.safetensors", size=int(quant_gib * (1 << 30)) // 2, sha256=str(i) * 64
            )
            for i in (1, 2)
        ) + tuple(
            RemoteFile(path=name, size=4096, git_oid=f"{i}" * 40)
            for i, name in enumerate(("config.json", "model.safetensors.index.json", "tokenizer_config.json"), 3)
        )
    files = shard_files(profile.model.quant, size=int(quant_gib * (1 << 30)) // 2, stem="K3")
    if profile.build.source == "fork" and profile.model.mmproj:
        files += (RemoteFile(path=profile.model.mmproj, size=900 << 20, sha256="f" * 64),)
    return files


LOCAL_DIR = "/srv/models"  # where a case's model.local_path (a file name) is on the fake host


def local_model_fact(profile: Profile, spec: dict[str, Any], previous: bool) -> ModelFact:
    """`model.local_path`'s file as the local collector reports it (observe/local_model.py); `observed.local` says
    what happened to it since `previous` was applied: verified (recorded, unmoved), unverified (never recorded),
    edited (new content: re-hashed, another sha256), touched (stat moved, sha256 the same)."""
    state, quant = spec.get("local", "verified"), profile.model.quant
    assert profile.model.local_path is not None
    name = f"{quant}/{Path(profile.model.local_path).name}"
    size = int(spec.get("quant_gib", 80) * (1 << 30))
    then = (RemoteFile(path=name, size=size, sha256="1" * 64),)
    now = (RemoteFile(path=name, size=size, sha256="2" * 64),) if state == "edited" and not previous else then
    moved = (name,) if state in ("edited", "touched") and not previous else ()
    return ModelFact(
        repo=profile.model.repo,
        revision=profile.model.revision,
        quant=quant,
        cache_dir=LOCAL_DIR,
        local_path=f"{LOCAL_DIR}/{Path(profile.model.local_path).name}",
        files=now,
        changed=moved,
        unrecorded=(name,) if moved or state == "unverified" else (),
        recorded_digest=None if state == "unverified" else manifest_digest(then, quant),
    )


def observed_for(profile: Profile, spec: dict[str, Any], host: HostFacts, previous: bool = False) -> Observed:
    """Observed state with no image/container: the inputs and model as the case says."""
    if profile.model.local_path is not None:
        return observed(
            profile, host=host, inputs=local_inputs(profile), model=local_model_fact(profile, spec, previous)
        )
    contents = {Path(p).name: str(spec.get("patches", {}).get(Path(p).name, p)) for p in profile.build.patches}
    patches = tuple(
        PatchFact(
            name=Path(p).name,
            path=f"/profiles/{p}",
            sha256=hashlib.sha256(contents[Path(p).name].encode()).hexdigest(),
            files=parse_unified_diff(contents[Path(p).name]),
        )
        for p in profile.build.patches
    )
    files = model_files(profile, spec.get("quant_gib", 80))
    model_spec = spec.get("model", "complete")
    named = (
        (lambda key: tuple(f.path for f in files if Path(f.path).name in model_spec.get(key, ())))
        if isinstance(model_spec, dict)
        else (lambda key: ())
    )
    missing = (
        {"complete": (), "absent": tuple(f.path for f in files)}.get(model_spec)
        if isinstance(model_spec, str)
        else named("missing") + named("edited") + named("corrupt")
    )
    cache_dir = profile.model.cache_dir or "/var/lib/kimik3/hub"
    mounts = (HOST_FIXTURES / spec["cache_mounts"]).read_text() if "cache_mounts" in spec else None
    pulled = pulled_fact(profile, spec.get("pulled", "present"))
    return observed(
        profile,
        host=host,
        inputs=local_inputs(profile, patches=patches),
        pulled=pulled,
        model=model_fact(
            profile,
            files=files,
            missing=missing,
            corrupt=named("edited") + named("corrupt"),
            quant=CHECKPOINT if checkpoint_engine(profile) else profile.model.quant,
            changed=named("edited") + named("touched"),
            unrecorded=named("touched"),
            cache_dir=cache_dir,
            cache_fs=parse_mount_of(mounts, cache_dir) if mounts else None,
        ),
    )


def pulled_fact(profile: Profile, state: Any) -> PulledImageFact | None:
    """The image of an engine that pulls it: `present` (the digest is here), `absent` (priced at 12 GiB), or
    {absent: reason} (the registry did not say); None for an engine that builds its image."""
    if engine_for(profile.engine).image_source.kind != "pull":
        return None
    ref = profile.image.ref
    if state == "present":
        return PulledImageFact(ref=ref, digest=ref.rpartition("@")[2], image_id="sha256:" + "9" * 64)
    if isinstance(state, dict):
        return PulledImageFact(ref=ref, digest=ref.rpartition("@")[2], size_unknown=state["absent"])
    return PulledImageFact(ref=ref, digest=ref.rpartition("@")[2], pull_bytes=12 << 30)


def hand_made(spec: ContainerSpec, drift: dict[str, Any]) -> ContainerSpec:
    """The container as recreated by hand from `spec`, same labels: another flag value, env, writable mounts."""
    command = list(spec.command)
    for flag, value in drift.get("argv", {}).items():
        command[command.index(flag) + 1] = str(value)
    mounts = tuple(replace(m, read_only=False) for m in spec.mounts) if drift.get("writable") else spec.mounts
    env = tuple(sorted({**dict(spec.env), **drift.get("env", {})}.items()))
    modes = {k: drift[k] for k in ("restart_policy", "network_mode", "ipc_mode") if k in drift}
    return replace(spec, command=tuple(command), mounts=mounts, env=env, **modes)


def host_facts(spec: dict[str, Any]) -> HostFacts:
    if "described" in spec and str(spec["described"]).endswith(".yaml"):
        fields = dict(spec)
        path = HOST_FIXTURES / fields.pop("described")
        described = described_host(yaml.safe_load(path.read_text()), path.name)
        return HostFacts.model_validate({**described.model_dump(), **fields})
    return recorded_host(spec) if "recorded" in spec or "described" in spec else HostFacts(**spec)


def build_case(case: dict[str, Any]) -> tuple[Profile, Observed]:
    # `base:` is the base profile's text, or the name of a base file beside the cases (_base-vllm-tp8.yaml)
    base = (
        BASE
        if "base" not in case
        else yaml.safe_load(
            (CASES / case["base"]).read_text() if re.fullmatch(r"_base[\w-]*\.yaml", case["base"]) else case["base"]
        )
    )
    if merge(base, case.get("desired")).get("engine", "llamacpp") not in ENGINES:
        pytest.skip(f"engine: {merge(base, case.get('desired'))['engine']} is not in the registry on this branch")
    desired = profile_of(merge(base, case.get("desired")))
    obs_spec = case.get("observed", {})
    host = host_facts(obs_spec.get("host", {"physical_cores": 8}))
    observed = observed_for(desired, obs_spec, host)
    gpu = {
        "gpu_plumbing": GpuPlumbing(**obs_spec["gpu_plumbing"]) if "gpu_plumbing" in obs_spec else None,
        "gpu_probe_record": {"passed": True, **obs_spec["gpu_probe"]} if "gpu_probe" in obs_spec else None,
    }
    observed = observed.model_copy(update=gpu)
    if "host_settings" in obs_spec:  # kimik3's sysctl.d file (absent, written as kimik3 writes it, or a text)
        settings = obs_spec["host_settings"]
        text = {"absent": None, "written": sysctl_text()}.get(settings.get("file"), settings.get("file"))
        observed = observed.model_copy(
            update={
                "host_settings": HostSettingsFact(
                    file_text=text,
                    live=settings.get("live", {}),
                    overridden_by=tuple(tuple(o) for o in settings.get("overridden_by", ())),
                )
            }
        )
    if "build_times" in obs_spec:  # the state records of the last builds measured here (host/build-time-*)
        observed = observed.model_copy(
            update={
                "build_time": obs_spec["build_times"].get("compile"),
                "cached_build_time": obs_spec["build_times"].get("cached"),
            }
        )
    if "loads" in obs_spec:  # the state records of the last loads measured here (host/load-rate, load/<name>)
        rate, last = obs_spec["loads"].get("rate"), obs_spec["loads"].get("container")
        observed = observed.model_copy(
            update={
                "load_rate": rate["bytes"] / rate["seconds"] if rate else None,
                "last_load": (last.get("bytes", observed.model.total_bytes), float(last["seconds"])) if last else None,
            }
        )
    if case.get("previous", {}) is None:
        return desired, observed.model_copy(
            update={
                "systemd": systemd_facts(obs_spec.get("systemd")),
                "workers": worker_facts(desired, None, obs_spec.get("workers", {})),
                **member_facts(desired, None, None, obs_spec.get("members", {}), running=False),
            }
        )
    previous = profile_of(merge(base, case.get("previous")))
    prev_host = host_facts(obs_spec["previous_host"]) if "previous_host" in obs_spec else host
    prev_obs = observed_for(
        previous,
        {**obs_spec, "patches": obs_spec.get("previous_patches", obs_spec.get("patches", {}))},
        prev_host,
        previous=True,
    ).model_copy(update=gpu)
    image = render_image_build(previous, prev_obs)
    pull = prev_obs.pulled  # an engine that pulls: the container runs image.ref, its fingerprint moves with the digest
    image_ref, image_fp = (pull.ref, pull.digest) if pull is not None else (image.tag, image.fingerprint)
    images = ()
    if obs_spec.get("image", "previous") == "previous" and pull is None:
        labels = dict(image.labels)
        if "built_on" in obs_spec:  # the executor stamps the base image ids it built on
            labels["kimik3.base-images"] = json.dumps(obs_spec["built_on"])
        if "built_on_digests" in obs_spec:  # ... and their repo digests
            labels["kimik3.base-digests"] = json.dumps(obs_spec["built_on_digests"])
        images = (
            ImageFact(
                id="sha256:prev",
                tags=(image.tag,),
                fingerprint=image.fingerprint,
                labels=labels,
                smoke=obs_spec.get("smoke", "passed"),
            ),
        )
    container = None
    c_spec = obs_spec.get("container", {"state": "running", "health": "ok"})
    if c_spec != "absent":
        launch = render_launch(previous, prev_obs, image_ref, image_fp)
        # What runs, read back through the real parser from the inspect JSON the adapter's launch makes.
        running = parse_running(container_inspect(hand_made(launch.spec, c_spec.get("drift", {})), "c" * 64, None))
        container = ContainerFact(
            id="c" * 64,
            name=previous.name,
            state=c_spec.get("state", "running"),
            image=image_ref,
            fingerprint=launch.fingerprint,
            inputs=launch.inputs,
            exit_code=c_spec.get("exit_code"),
            health=c_spec.get("health"),
            running=running,
            pid=c_spec.get("pid"),
            rss_bytes=int(c_spec["rss_gib"] * (1 << 30)) if "rss_gib" in c_spec else None,
            crash=crash_cause(False, (FIXTURES / c_spec["log"]).read_text(), engine_for("llamacpp").log_signs)
            if "log" in c_spec
            else None,
        )
    systemd = systemd_facts(obs_spec.get("systemd"), previous, prev_obs, image.tag, image.fingerprint)
    if desired.workers and container is not None:
        container = container.model_copy(update={"started_at": MAIN_STARTED})
    workers = worker_facts(desired, previous, obs_spec.get("workers", {}), image)
    removed = removed_worker_facts(desired, previous, obs_spec.get("removed_workers", {}))
    removed_members = removed_member_facts(desired, previous, obs_spec.get("removed_members", {}))
    exporter = exporter_fact(obs_spec.get("exporter"), previous, prev_obs)
    front = front_fact(obs_spec.get("front"), previous, prev_obs)
    head = render_launch(previous, prev_obs, image_ref, image_fp)
    running = container is not None and container.state == "running"
    members = member_facts(desired, previous, head, obs_spec.get("members", {}), running)
    return desired, observed.model_copy(
        update={
            **members,
            "workers": workers,
            "exporter": exporter,
            "front": front,
            "images": images,
            "removed_workers": removed,
            "removed_members": removed_members,
            "container": container,
            "base_images": obs_spec.get("base_images", {}),
            "systemd": systemd,
            "base_digests": obs_spec.get("base_digests", {}),
            "unverified": container.fingerprint if container and obs_spec.get("unverified") else None,
        }
    )


MAIN_STARTED, WORKER_STARTED, LATER = "2026-12-01T10:00:00.5Z", "2026-12-01T09:59:58.123456789Z", "2026-12-01T11:00:00Z"


def worker_facts(
    desired: Profile, previous: Profile | None, spec: dict[str, Any], image: Any = None
) -> tuple[WorkerFact, ...]:
    """Each desired worker's host as `previous` left it (its image, its rpc-server) unless the case says otherwise."""
    facts = []
    made = {w.name: w for w in previous.workers} if previous is not None else {}
    for worker in desired.workers:
        w_spec = spec.get(worker.name, {})
        fact = WorkerFact(
            name=worker.name,
            docker=worker.docker,
            error=w_spec.get("error"),
            same_daemon=w_spec.get("same_daemon", False),
            context_bytes=w_spec.get("context_bytes", 1 << 20),
            mem_total=w_spec.get("mem_total"),
            devices=tuple(RpcDeviceFact(name=n, total=t, free=f) for n, t, f in w_spec.get("devices", ())),
        )
        was = made.get(worker.name)
        if w_spec.get("image", "previous") == "previous" and was is not None:
            fact = fact.model_copy(
                update={"images": (ImageFact(id="sha256:prev", tags=(image.tag,), fingerprint=image.fingerprint),)}
            )
        c_spec = w_spec.get("container", {"state": "running"})
        if c_spec != "absent" and was is not None:
            cspec, digest = render_worker(previous, was, image.tag, image.fingerprint)
            fact = fact.model_copy(
                update={
                    "container": ContainerFact(
                        id="w" * 64,
                        name=cspec.name,
                        state=c_spec.get("state", "running"),
                        fingerprint=digest,
                        inputs=worker_inputs(previous, was, image.fingerprint),
                        started_at=LATER if c_spec.get("restarted") else WORKER_STARTED,
                    ),
                    "port_open": w_spec.get("port_open", c_spec.get("state", "running") == "running"),
                    "listeners": tuple(w_spec.get("listeners", (worker.bind,))),
                }
            )
        facts.append(fact)
    return tuple(facts)


def member_facts(
    desired: Profile, previous: Profile | None, head: Any, spec: dict[str, Any], running: bool
) -> dict[str, Any]:
    """Each desired cluster node as `previous`'s apply left it (its image, its member container, alive in Ray's table
    when the head's container runs: vllm) unless the case says otherwise: Observed's `members` and `ray_alive`."""
    if desired.cluster is None:
        return {}
    made = {n[0].name: n for n in rendered_members(previous, head)} if previous is not None and head else {}
    facts, alive = [], [desired.cluster.bind]
    for node in desired.cluster.nodes:
        n_spec = spec.get(node.name, {})
        fact = MemberFact(
            name=node.name,
            docker=node.docker,
            error=n_spec.get("error"),
            gpus=DockerGpus(**n_spec["docker_gpus"]) if "docker_gpus" in n_spec else None,
        )
        was = made.get(node.name)
        if n_spec.get("image", "present") == "present" and previous is not None:
            fact = fact.model_copy(update={"image_present": True})
        c_spec = n_spec.get("container", {"state": "running"})
        if c_spec != "absent" and was is not None:
            launch, _, cspec, digest = was
            container = ContainerFact(
                id="m" * 64,
                name=cspec.name,
                state=c_spec.get("state", "running"),
                exit_code=c_spec.get("exit_code"),
                fingerprint=digest,
                inputs=json.loads(dict(cspec.labels)[MEMBER_INPUTS]),
            )
            fact = fact.model_copy(update={"container": container})
            if container.state == "running" and n_spec.get("ray", "alive") == "alive":
                alive.append(node.bind)
        facts.append(fact)
    ray = tuple(sorted(alive)) if running and desired.engine == "vllm" else None
    return {"members": tuple(facts), "ray_alive": ray}


def removed_worker_facts(desired: Profile, previous: Profile, spec: dict[str, Any]) -> tuple[RemovedWorkerFact, ...]:
    """`previous`'s workers (the record its apply left) that the desired profile no longer names."""
    return _removed_facts(desired, desired.workers, previous, previous.workers, spec, "r")


def removed_member_facts(desired: Profile, previous: Profile, spec: dict[str, Any]) -> tuple[RemovedWorkerFact, ...]:
    """`previous`'s cluster nodes (the record its apply left) whose member the desired profile no longer names."""
    return _removed_facts(desired, _nodes(desired), previous, _nodes(previous), spec, "n")


def _nodes(profile: Profile) -> tuple[Any, ...]:
    return tuple(profile.cluster.nodes) if profile.cluster is not None else ()


def _removed_facts(
    desired: Profile,
    named_hosts: Iterable[Any],
    previous: Profile,
    recorded_hosts: Iterable[Any],
    spec: dict[str, Any],
    id_char: str,
) -> tuple[RemovedWorkerFact, ...]:
    """A removed worker's or member's fact per recorded host whose (Docker, container) `named_hosts` no longer name;
    its container running unless its spec says absent or gives an error."""
    named = {(h.docker, h.container_name(desired.name)) for h in named_hosts}
    facts = []
    for host in recorded_hosts:
        container = host.container_name(previous.name)
        if (host.docker, container) in named:
            continue
        h_spec = spec.get(host.name, {})
        fact = RemovedWorkerFact(
            name=host.name,
            docker=host.docker,
            tls_dir=host.tls_dir,
            container_name=container,
            error=h_spec.get("error"),
        )
        if h_spec.get("container", "running") != "absent" and not fact.error:
            fact = fact.model_copy(
                update={"container": ContainerFact(id=id_char * 64, name=container, state="running")}
            )
        facts.append(fact)
    return tuple(facts)


def exporter_fact(state: str | None, previous: Profile, prev_obs: Observed) -> ExporterFact | None:
    """The exporter the previous apply started, as its state record and /healthz show it now."""
    config = render_exporter(render_desired(previous, prev_obs), prev_obs) if state is not None else None
    assert state is None or config is not None, "exporter: needs a previous profile with a metrics: section"
    return helper_fact(state, config, 4242, f"{previous.unit_name}-metrics.service" if previous.systemd else None)


def front_fact(state: str | None, previous: Profile, prev_obs: Observed) -> ExporterFact | None:
    """The front (metrics.handover) the previous apply started, as its record and control /healthz show it now."""
    config = render_front(render_desired(previous, prev_obs), prev_obs) if state is not None else None
    assert state is None or config is not None, "front: needs a previous profile with metrics.handover"
    return helper_fact(state, config, 4343, f"{previous.unit_name}-front.service" if previous.systemd else None)


def helper_fact(state: str | None, config: Any, pid: int, unit: str | None) -> ExporterFact | None:  # noqa: ANN401
    """A helper process's record as observe reads it (none where `state` is None): under a systemd `unit`, no pid
    and its /healthz (the front's control one) alone says it runs; else the process `pid`, alive unless `state` is
    dead. `config`: the exporter's or the front's."""
    if state is None:
        return None
    if unit is not None:
        return ExporterFact(
            pid=0,
            fingerprint=config.fingerprint,
            config=config.to_json(),
            alive=state == "serving",
            serving=config.fingerprint if state == "serving" else None,
            unit=unit,
        )
    return ExporterFact(
        pid=pid,
        fingerprint=config.fingerprint,
        config=config.to_json(),
        alive=state != "dead",
        serving=config.fingerprint if state == "serving" else None,
    )


def systemd_facts(
    spec: dict[str, Any] | None,
    previous: Profile | None = None,
    prev_obs: Observed | None = None,
    tag: str = "",
    image_fp: str = "",
) -> SystemdFacts | None:
    """systemd as the case says; an installed unit is the one kimik3 rendered for `previous`."""
    if spec is None:
        return None
    facts = SystemdFacts(
        booted=spec.get("booted", True),
        state="running" if spec.get("booted", True) else "offline",
        docker_cli="/usr/bin/docker",
        kimik3_argv=("/usr/bin/python3", "-m", "kimik3_reconciler"),
        kimik3_env={"KIMIK3_STATE_DIR": "/var/lib/kimik3", "PYTHONPATH": "/opt/kimik3"},
    )
    if spec.get("unit", "absent") == "absent" or previous is None or previous.systemd is None:
        return facts
    install = render_install(previous, prev_obs, render_launch(previous, prev_obs, tag, image_fp), "/usr/bin/docker")
    text = install.unit_text
    if spec["unit"] == "edited":  # an operator's edit, header kept
        text = text.replace("RestartSec=10", "RestartSec=30")
    unit = UnitFact(
        name=install.unit,
        unit_file=parse_unit_file(install.unit_path, text),
        env_file=parse_unit_file(install.env_path, install.env_text),
        load_state="loaded",
        active_state=spec.get("active", "active"),
        unit_file_state="enabled" if spec.get("enabled", previous.systemd.enable) else "disabled",
    )
    units = [unit]
    if spec.get("exporter_unit", "absent") != "absent":
        exporter = render_exporter_install(previous, prev_obs.model_copy(update={"systemd": facts}), "/usr/bin/docker")
        text = exporter.unit_text
        if spec["exporter_unit"] == "edited":
            text = text.replace("RestartSec=5", "RestartSec=30")
        units.append(
            UnitFact(
                name=exporter.unit,
                unit_file=parse_unit_file(exporter.unit_path, text),
                env_file=parse_unit_file(exporter.env_path, exporter.env_text),
                load_state="loaded",
                active_state="active",
                main_pid=4343,
                unit_file_state=unit.unit_file_state,
            )
        )
    if spec.get("front_unit", "absent") != "absent":
        config = render_front(render_desired(previous, prev_obs), prev_obs)
        front = plan_front_unit(previous, prev_obs.model_copy(update={"systemd": facts}), config)[0].spec.install
        units.append(
            UnitFact(
                name=front.unit,
                unit_file=parse_unit_file(front.unit_path, front.unit_text),
                env_file=parse_unit_file(front.env_path, front.env_text),
                load_state="loaded",
                active_state="active",
                main_pid=4444,
                unit_file_state=unit.unit_file_state,
            )
        )
    return facts.model_copy(update={"units": tuple(units)})


def case_files() -> list[Path]:
    return sorted(p for p in CASES.glob("*.yaml") if not p.name.startswith("_"))


def write_local_files(root: Path, files: dict[str, str]) -> None:
    """`local_files` of a case: name -> gguf (the GGUF magic and a few bytes), text (anything else), folder."""
    for name, kind in files.items():
        path = root / name
        if kind == "folder":
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"GGUF\x03\x00\x00\x00" + name.encode() if kind == "gguf" else b"version https://git-lfs")


def refused_input(case: dict[str, Any], root: Path) -> None:
    """A case of bad local input (`local_files` on a real folder): the real collector refuses it, naming the
    field, before anything is planned (exit 2: InputError)."""
    base = yaml.safe_load(case["base"]) if "base" in case else BASE
    profile = profile_of(merge(base, case.get("desired")))
    write_local_files(root, case.get("local_files", {}))
    with pytest.raises(InputError, match=re.escape(case["refuses_input"])) as refused:
        collect_local_model(profile, MemoryState(), None, root, FakeHost())
    assert refused.value.exit_code == 2 and refused.value.fields == (("model", "local_path"),)
    assert str(refused.value).startswith("model.local_path: ")


@pytest.mark.parametrize("path", case_files(), ids=lambda p: p.stem)
def test_plan_case(path: Path, tmp_path: Path) -> None:
    case = yaml.safe_load(path.read_text())
    if "refuses_input" in case:
        refused_input(case, tmp_path)
        return
    profile, observed = build_case(case)
    if "refuses" in case:
        with pytest.raises(PlanError, match=re.escape(case["refuses"])):
            plan(profile, observed)
        return
    result = plan(profile, observed)
    got = [(s.kind, s.action.name.lower()) for s in result.steps]
    want = [(e[0], e[1]) for e in case["expect"]]
    assert got == want, f"{path.name}: {case.get('description')}"
    for step, expected in zip(result.steps, case["expect"]):
        if len(expected) > 2 and expected[2]:
            assert expected[2] in step.reason, f"{step.kind}: {step.reason!r}"
        if len(expected) > 3:
            lines = [str(d) for d in step.diff]
            assert len(lines) == len(expected[3]) and all(map(fnmatch.fnmatchcase, lines, expected[3])), lines
    for kind, costs in case.get("costs", {}).items():
        step = next(s for s in result.steps if s.kind == kind)
        assert all(cost in step.cost for cost in costs), f"{kind}: {step.cost!r}"
    for warning in case.get("warnings", []):
        assert any(warning in w for w in result.warnings + tuple(w for s in result.steps for w in s.warnings)), warning
    for route in case.get("routes", []):
        assert any(route in line for line in result.routes.lines()), (route, result.routes.lines())


def test_there_are_enough_cases() -> None:
    assert len(case_files()) >= 15
