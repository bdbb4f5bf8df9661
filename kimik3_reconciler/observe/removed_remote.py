"""Recorded members launched through another host's Docker (RPC workers, cluster nodes) that the profile no longer
names: each seen through the Docker it was launched on, so an apply removes it there.

A Docker that does not answer is recorded on the fact, not raised: the planner refuses with the member named."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from kimik3_reconciler.errors import Kimik3Error
from kimik3_reconciler.model.facts import RemovedWorkerFact
from kimik3_reconciler.model.specs import DockerHost
from kimik3_reconciler.observe.docker_objects import parse_container
from kimik3_reconciler.ports import DockerPort


def collect_removed(
    entries: Iterable[dict[str, str | None]],
    still_named: Mapping[str, DockerHost],
    worker_docker: Callable[[DockerHost], DockerPort] | None,
    unwired: str,
    more: Callable[[DockerPort, RemovedWorkerFact], RemovedWorkerFact] | None = None,
) -> tuple[RemovedWorkerFact, ...]:
    """One fact per recorded entry ({"name", "docker", "tls_dir", "container"}) the caller found dropped.
    still_named: the Docker the profile still names for a container name; unwired: the error when worker_docker is
    None; more: what the caller reads beyond the container (an RPC worker's tensor-cache volume)."""
    facts = []
    for entry in entries:
        fact = RemovedWorkerFact(
            name=str(entry["name"]),
            docker=str(entry["docker"]),
            tls_dir=entry.get("tls_dir"),
            container_name=str(entry["container"]),
        )
        try:
            if worker_docker is None:
                raise Kimik3Error(unwired)
            docker = worker_docker(DockerHost(fact.name, fact.docker, fact.tls_dir))
            still = still_named.get(fact.container_name)
            if still is not None and same_daemon(docker, worker_docker(still)):
                # Only the URL moved (ssh:// to tcp:// of one host): removing that name would remove the member the
                # profile still names.
                continue
            inspect = docker.inspect_container(fact.container_name)
            if inspect is not None:
                fact = fact.model_copy(update={"container": parse_container(inspect)})
            if more is not None:
                fact = more(docker, fact)
        except Kimik3Error as exc:
            fact = fact.model_copy(update={"error": str(exc)})
        facts.append(fact)
    return tuple(facts)


def same_daemon(one: DockerPort, other: DockerPort) -> bool:
    try:
        ours = one.info().get("ID")
        return bool(ours) and ours == other.info().get("ID")
    except Kimik3Error:  # the new URL does not answer: the old one is judged on its own
        return False
