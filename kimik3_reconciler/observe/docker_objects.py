"""Images and the profile's container, from docker's inspect JSON (pure parsers + collectors)."""

from __future__ import annotations

import json
from typing import Any

from kimik3_reconciler.model.facts import ContainerFact, ImageFact
from kimik3_reconciler.model.records import smoke_key
from kimik3_reconciler.model.labels import PROFILE_LABEL, CONTAINER_FINGERPRINT, CONTAINER_INPUTS, HEALTH_URL, IMAGE_FINGERPRINT
from kimik3_reconciler.ports import DockerPort, HttpPort, StatePort


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
        image_id=inspect.get("Image"),
        fingerprint=labels.get(CONTAINER_FINGERPRINT),
        inputs=inputs,
        started_at=state.get("StartedAt"),
        exit_code=state.get("ExitCode") if state.get("Status") == "exited" else None,
        restart_count=inspect.get("RestartCount", 0),
        profile=labels.get(PROFILE_LABEL),
        pid=state.get("Pid") or None,
    )


def collect_images(docker: DockerPort, state: StatePort) -> tuple[ImageFact, ...]:
    facts = []
    for attrs in docker.list_images(label=IMAGE_FINGERPRINT):
        fact = parse_image(attrs)
        record = state.read(smoke_key(fact.fingerprint)) if fact.fingerprint else None
        if record:
            fact = fact.model_copy(update={"smoke": "passed" if record.get("passed") else "failed",
                                           "smoke_detail": record.get("detail")})
        facts.append(fact)
    return tuple(facts)


def collect_base_images(docker: DockerPort, refs: tuple[str, ...]) -> dict[str, str | None]:
    """Local ids of the build's base images (None = not pulled yet: the build pulls it)."""
    return {ref: docker.image_id(ref) for ref in dict.fromkeys(refs)}


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


def collect_others(docker: DockerPort, name: str) -> tuple[ContainerFact, ...]:
    """Other profiles' serving containers (not smoke tests): they may hold the same GPUs or port."""
    facts = (parse_container(i) for i in docker.list_containers(label=CONTAINER_FINGERPRINT))
    return tuple(f for f in facts if f.name != name)
