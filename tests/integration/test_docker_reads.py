"""The socket reader (adapters/docker_socket.py) against the real dockerd: the same answers as the docker SDK's
APIClient for every read kimik3 makes, so observation cannot tell which one read (docs/design.md
"Observation costs"). One created (never started) container of the base image; seconds."""

from __future__ import annotations

from collections.abc import Iterator

import docker as docker_sdk
import pytest
from support.realparts import docker, require_docker_and_demo_hub

from kimik3_reconciler.adapters.docker_engine import DockerEngine
from kimik3_reconciler.adapters.docker_socket import EngineSocket, engine_socket
from kimik3_reconciler.model.labels import IMAGE_FINGERPRINT

pytestmark = pytest.mark.docker

NAME = "k3perf-reads"
BASE = "kimik3-test/debian-build:bookworm"  # scripts/ensure-base-image.sh makes it before the suite
LABEL = f"kimik3.test={NAME}"


@pytest.fixture(scope="module")
def container() -> Iterator[str]:
    require_docker_and_demo_hub()
    docker("rm", "-f", NAME)
    docker(
        "create",
        "--name",
        NAME,
        "--label",
        LABEL,
        "--label",
        "kimik3.health-url=http://127.0.0.1:9/health",
        BASE,
        "true",
    )
    yield NAME
    docker("rm", "-f", NAME)


def test_socket_and_sdk_answer_the_same(container: str) -> None:
    path = engine_socket(None)
    assert path is not None, "this suite talks to dockerd over its default unix socket"
    ours, sdk = EngineSocket(path), docker_sdk.from_env().api
    assert ours.inspect_container(container) == sdk.inspect_container(container)
    assert ours.inspect_image(BASE) == sdk.inspect_image(BASE)
    assert ours.images(filters={"label": IMAGE_FINGERPRINT}) == sdk.images(filters={"label": IMAGE_FINGERPRINT})
    listed = [ours.containers(all=True, filters={"label": LABEL}), sdk.containers(all=True, filters={"label": LABEL})]
    for summaries in listed:  # "Created 2 seconds ago" may cross a second between the two reads
        for summary in summaries:
            summary.pop("Status")
    assert listed[0] == listed[1] and [c["Names"] for c in listed[0]] == [[f"/{container}"]]
    info = [ours.info(), sdk.info()]
    assert info[0].keys() == info[1].keys() and info[0]["ServerVersion"] == info[1]["ServerVersion"]


def test_the_engine_reads_over_the_socket_what_the_sdk_reads(container: str) -> None:
    engine, through_sdk = DockerEngine(), DockerEngine()
    through_sdk._reads = through_sdk.client.api  # as for DOCKER_HOST=tcp://… or a named context
    assert isinstance(engine.reads, EngineSocket)
    assert engine.inspect_container(container) == through_sdk.inspect_container(container)
    assert engine.inspect_container("k3perf-absent") is None and through_sdk.inspect_container("k3perf-absent") is None
    assert engine.image_id(BASE) == through_sdk.image_id(BASE) == docker("image", "inspect", "-f", "{{.Id}}", BASE)
    assert engine.list_images(IMAGE_FINGERPRINT) == through_sdk.list_images(IMAGE_FINGERPRINT)
    assert engine.list_images(IMAGE_FINGERPRINT) == [
        i.attrs for i in docker_sdk.from_env().images.list(filters={"label": IMAGE_FINGERPRINT})
    ]  # what list_images returned before it read over the socket
