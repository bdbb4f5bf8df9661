"""The profile's container: launch (create, or replace: remove then create), start, stop, remove."""

from __future__ import annotations

from kimik3_reconciler.model.specs import LaunchContainer, RemoveContainer, StartContainer, StopContainer
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.report import Reporter


def launch_container(spec: LaunchContainer, ports: Ports, reporter: Reporter) -> None:
    name = spec.container.name
    if spec.replace:
        # GPUs and the port are exclusive: the old container must be gone before the new one starts.
        ports.docker.remove_container(name)
        reporter.event("removed", container=name)
    container_id = ports.docker.run_container(spec.container)
    reporter.event("launched", container=name, id=container_id[:12])


def start_container(spec: StartContainer, ports: Ports, reporter: Reporter) -> None:
    ports.docker.start_container(spec.name)
    reporter.event("started", container=spec.name)


def stop_container(spec: StopContainer, ports: Ports, reporter: Reporter) -> None:
    ports.docker.stop_container(spec.name)
    reporter.event("stopped", container=spec.name)


def remove_container(spec: RemoveContainer, ports: Ports, reporter: Reporter) -> None:
    ports.docker.remove_container(spec.name)
    reporter.event("removed", what="container", ref=spec.name)
