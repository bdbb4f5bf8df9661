"""A replica over several hosts (vllm.cluster / sglang.cluster): on a node, pull the image by digest, check it sees
the checkpoint, launch or remove its member container; on the head, wait until Ray's node table shows every host.
Every effect on a node goes through that node's own Docker (`ports.worker_docker(host)`)."""

from __future__ import annotations

import copy
import json

from kimik3_reconciler.engines import engine_for
from kimik3_reconciler.errors import Kimik3Error, LoadFailed, PermanentError
from kimik3_reconciler.model.labels import PROFILE_LABEL
from kimik3_reconciler.model.records import cluster_members_key
from kimik3_reconciler.model.specs import MemberCheckpoint, MemberImage, MemberLaunch, MemberRemove, MemberWait
from kimik3_reconciler.observe.cluster import RAY_NODES, ray_alive
from kimik3_reconciler.observe.server_log import ROOT_LOG_TAIL, first_error
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.image_pull import pull_image
from kimik3_reconciler.steps.report import Reporter
from kimik3_reconciler.steps.workers import forget_worker, remember_workers, worker_docker

_LOG_TAIL = 40
_LOOK_EVERY_S = 5.0
_SHOWN = 5  # files named in a refusal; the rest counted
_CHECK_TIMEOUT_S = 300.0  # a listing of a checkpoint's few hundred files: seconds, unless the node's disk hangs


def member_image(spec: MemberImage, ports: Ports, reporter: Reporter) -> None:
    """The head's pull, through the node's Docker: the same digest check, the same errors naming image.ref."""
    moved = copy.copy(ports)
    moved.docker = worker_docker(ports, spec.host)
    reporter.event("node", node=spec.host.name)
    pull_image(spec.pull, moved, reporter)


def check_member_checkpoint(spec: MemberCheckpoint, ports: Ports, reporter: Reporter) -> None:
    docker = worker_docker(ports, spec.host)
    code, out, err = docker.run_to_completion(spec.container, _CHECK_TIMEOUT_S)
    try:
        found: dict[str, int] = json.loads(out.strip().splitlines()[-1]) if code == 0 else {}
    except (ValueError, IndexError):
        found, code = {}, code or -1
    if code != 0:
        raise PermanentError(
            f"cluster node {spec.host.name}: listing the checkpoint at {spec.snapshot} failed (exit {code}): "
            f"{err.strip()[-500:]}"
        )
    wrong = [
        f"{path} ({'absent' if path not in found else f'{found[path]} bytes, verified {size}'})"
        for path, size in spec.files
        if found.get(path) != size
    ]
    if wrong:
        # rule: cluster-node-checkpoint
        # Each node loads its ranks' weights from its own disk at the head's path: without them it fails the load.
        more = f" and {len(wrong) - _SHOWN} more" if len(wrong) > _SHOWN else ""
        source = spec.container.mounts[0].source
        raise PermanentError(
            f"cluster node {spec.host.name}: model.cache_dir: the node does not hold the checkpoint the head verified "
            f"at {source}: {', '.join(wrong[:_SHOWN])}{more}. vLLM and SGLang load it from the same path on every "
            f"node: copy it there (e.g. rsync -a {source}/ {spec.host.name}:{source}/), then apply again"
        )
    reporter.event("checkpoint", node=spec.host.name, files=len(spec.files))


def launch_member(spec: MemberLaunch, ports: Ports, reporter: Reporter) -> None:
    docker, name = worker_docker(ports, spec.host), spec.container.name
    if spec.replace:
        docker.remove_container(name)
        reporter.event("removed", node=spec.host.name, container=name)
    profile = dict(spec.container.labels).get(PROFILE_LABEL, "")
    # Recorded before it runs: an apply interrupted after this launch still knows the member to remove once the
    # profile drops its node.
    remember_workers(ports.state, profile, ((spec.host, name),), key=cluster_members_key(profile))
    container_id = docker.run_container(spec.container)
    reporter.event("launched", node=spec.host.name, container=name, id=container_id[:12])


def remove_member(spec: MemberRemove, ports: Ports, reporter: Reporter) -> None:
    worker_docker(ports, spec.host).remove_container(spec.name)
    reporter.event("removed", node=spec.host.name, container=spec.name)
    if spec.profile:  # forgotten only once removed: a failed removal is planned again next time
        forget_worker(ports.state, spec.profile, spec.host, spec.name, key=cluster_members_key(spec.profile))


def wait_for_members(spec: MemberWait, ports: Ports, reporter: Reporter) -> None:
    """Ray's node table through the head's container until every address has a live raylet. The head's container
    exiting (its Ray or its server failed) ends the wait with its log."""
    deadline = ports.clock.monotonic() + spec.timeout_s
    alive: frozenset[str] = frozenset()
    why = ""
    while True:
        inspect = ports.docker.inspect_container(spec.head) or {}
        state = (inspect.get("State") or {}).get("Status")
        if state not in ("running", "created", "restarting"):
            # vLLM's first error is printed long before its last lines (engines/base.py LogSigns.root).
            first = first_error(ports.docker.container_logs(spec.head, ROOT_LOG_TAIL), engine_for("vllm").log_signs)
            raise LoadFailed(
                f"the head's container {spec.head} is {state} while its nodes join Ray"
                + (f"; its log's first error: {first}" if first else ""),
                ports.docker.container_logs(spec.head, _LOG_TAIL),
            )
        try:
            alive = ray_alive(ports.docker.exec_output(spec.head, list(RAY_NODES)))
        except (Kimik3Error, ValueError, KeyError, IndexError) as exc:  # Ray's head starting: asked again
            why = str(exc).strip()[-300:]
        if set(spec.addresses) <= alive:
            break
        if ports.clock.monotonic() > deadline:
            missing = sorted(set(spec.addresses) - alive)
            raise LoadFailed(
                f"Ray's node table shows no live raylet at {', '.join(missing)} after {spec.timeout_s:.0f} s"
                + (f" (last read: {why})" if why else ""),
                ports.docker.container_logs(spec.head, _LOG_TAIL),
            )
        ports.clock.sleep(_LOOK_EVERY_S)
    reporter.event("joined", nodes=",".join(spec.addresses))
