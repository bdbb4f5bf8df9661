"""Images and the profile's container, from docker's inspect JSON (pure parsers + collectors)."""

from __future__ import annotations

import json
from typing import Any

from kimik3_reconciler.model.facts import ContainerFact, ImageFact
from kimik3_reconciler.model.labels import CONTAINER_FINGERPRINT, CONTAINER_INPUTS, HEALTH_URL, IMAGE_FINGERPRINT
from kimik3_reconciler.ports import DockerPort, HttpPort


def parse_image(attrs: dict[str, Any]) -> ImageFact:
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    return ImageFact(
        id=attrs["Id"], tags=tuple(attrs.get("RepoTags") or ()), fingerprint=labels.get(IMAGE_FINGERPRINT),
        labels=dict(labels),
    )


def parse_container(inspect: dict[str, Any]) -> ContainerFact:
    labels = (inspect.get("Config") or {}).get("Labels") or {}
    state = inspect.get("State") or {}
    try:
        inputs = json.loads(labels.get(CONTAINER_INPUTS, "{}"))
    except json.JSONDecodeError:
        inputs = {}  # hand-edited label: the fingerprint mismatch will replace the container
    return ContainerFact(
        id=inspect["Id"],
        name=inspect.get("Name", "").lstrip("/"),
        state=state.get("Status", "dead"),
        image=(inspect.get("Config") or {}).get("Image", ""),
        fingerprint=labels.get(CONTAINER_FINGERPRINT),
        inputs=inputs,
        started_at=state.get("StartedAt"),
        exit_code=state.get("ExitCode") if state.get("Status") == "exited" else None,
        restart_count=inspect.get("RestartCount", 0),
    )


def collect_images(docker: DockerPort) -> tuple[ImageFact, ...]:
    return tuple(parse_image(a) for a in docker.list_images(label=IMAGE_FINGERPRINT))


def collect_container(docker: DockerPort, http: HttpPort, name: str) -> ContainerFact | None:
    inspect = docker.inspect_container(name)
    if inspect is None:
        return None
    fact = parse_container(inspect)
    url = ((inspect.get("Config") or {}).get("Labels") or {}).get(HEALTH_URL)
    if fact.state == "running" and url:
        # The container says where it listens (label stamped at launch), so no profile math here.
        fact = fact.model_copy(update={"health": http.health(url)})
    return fact
