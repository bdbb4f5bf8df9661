"""The profile's container: launch (create, or replace: remove then create), start, stop, remove; and, with its
removal by destroy, its saved slots' volume (when asked) and the records that would bring it back."""

from __future__ import annotations

import json

from kimik3_reconciler.model.labels import CONTAINER_FINGERPRINT, CONTAINER_INPUTS
from kimik3_reconciler.model.records import unverified_key
from kimik3_reconciler.model.specs import (
    ForgetDeployment,
    LaunchContainer,
    RemoveContainer,
    RemoveVolume,
    StartContainer,
    StopContainer,
)
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.image import pin_tag
from kimik3_reconciler.steps.report import Reporter


def _record_unverified(ports: Ports, name: str, fingerprint: str | None) -> None:
    """Written before the health wait: if apply dies (or dockerd restarts) before verify, the next plan holds
    `<= verify`. Only by an apply that verifies (a verifier is wired): `--no-verify-server` owes no verify."""
    if fingerprint and ports.verifier is not None:
        ports.state.write(
            unverified_key(name), {"fingerprint": fingerprint, "date": ports.clock.now().isoformat(timespec="seconds")}
        )


def launch_container(spec: LaunchContainer, ports: Ports, reporter: Reporter) -> None:
    name = spec.container.name
    # Before the old container goes: a record that cannot be written (a full state dir) fails the step while the
    # old server still serves (issue 30), never after it was removed.
    _record_unverified(ports, name, dict(spec.container.labels).get(CONTAINER_FINGERPRINT))
    if spec.replace:
        # GPUs and the port are exclusive: the old container must be gone before the new one starts.
        ports.docker.remove_container(name)
        reporter.event("removed", container=name)
    inputs = json.loads(dict(spec.container.labels).get(CONTAINER_INPUTS) or "{}")
    pin_tag(ports.docker, spec.container.image, inputs.get("image.fingerprint"), reporter)
    container_id = ports.docker.run_container(spec.container)
    reporter.event("launched", container=name, id=container_id[:12])


def start_container(spec: StartContainer, ports: Ports, reporter: Reporter) -> None:
    labels = ((ports.docker.inspect_container(spec.name) or {}).get("Config") or {}).get("Labels") or {}
    try:
        _record_unverified(ports, spec.name, labels.get(CONTAINER_FINGERPRINT))
    except OSError as exc:
        # Nothing serves (the container is stopped): a full state dir must not keep the server from starting
        # (issue 30). This apply still verifies the start at its end; only an interrupted one would not be owed.
        reporter.event(
            "warning",
            record=unverified_key(spec.name),
            error=f"{exc.filename}: {exc.strerror}",
            consequence="started without the record of an owed verify",
        )
    ports.docker.start_container(spec.name)
    reporter.event("started", container=spec.name)


def stop_container(spec: StopContainer, ports: Ports, reporter: Reporter) -> None:
    ports.docker.stop_container(spec.name)
    reporter.event("stopped", container=spec.name)


def remove_container(spec: RemoveContainer, ports: Ports, reporter: Reporter) -> None:
    ports.docker.remove_container(spec.name)
    reporter.event("removed", what="container", ref=spec.name)


def remove_volume(spec: RemoveVolume, ports: Ports, reporter: Reporter) -> None:
    ports.docker.remove_volume(spec.name)
    reporter.event("removed", what="volume", ref=spec.name)


def forget_deployment(spec: ForgetDeployment, ports: Ports, reporter: Reporter) -> None:
    for key in spec.keys:
        ports.state.delete(key)
        reporter.event("removed", what="record", ref=key)
