"""Base image digests: a tag is resolved to its local repo digest at build time and recorded on the image;
a tag now at another digest rebuilds; a profile may pin a digest (then it is in the fingerprint); an image
built before digests were recorded is not rebuilt for it (upgrading kimik3 rebuilds nothing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.fakes import FAKE_PROFILE, FAKE_REVISION, FakeHub, fake_ports

from kimik3_reconciler.errors import ProfileError
from kimik3_reconciler.model.labels import BASE_DIGESTS, BASE_IMAGES
from kimik3_reconciler.model.plan import Action
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.observe.docker_objects import parse_repo_digest, repository
from kimik3_reconciler.orchestrator import Orchestrator
from kimik3_reconciler.steps.report import NullReporter

RUNTIME = "nvidia/cuda:13.0.0-runtime-ubuntu24.04"
BUILD = "nvidia/cuda:13.0.0-devel-ubuntu24.04"
D1, D2, D3 = (f"sha256:{c * 64}" for c in "abc")
FILES = {"UD-Q2_K_XL/k3-UD-Q2_K_XL-00001-of-00001.gguf": b"shard" * 10}
TAGGED = FAKE_PROFILE.replace(
    "cpu_features: []", f"cpu_features: [], base_images: {{build: '{BUILD}', runtime: '{RUNTIME}'}}"
)


def test_the_repository_of_a_ref_and_its_digest_among_repo_digests() -> None:
    assert repository(f"{RUNTIME}@{D1}") == repository(RUNTIME) == "nvidia/cuda"
    assert repository("registry.local:5000/team/cuda:13") == "registry.local:5000/team/cuda"
    assert repository("registry.local:5000/team/cuda") == "registry.local:5000/team/cuda"
    inspect = {"RepoDigests": [f"mirror.local/nvidia/cuda@{D2}", f"nvidia/cuda@{D1}"]}
    assert parse_repo_digest(RUNTIME, inspect) == D1
    assert parse_repo_digest("docker.io/library/debian:bookworm", {"RepoDigests": [f"debian@{D3}"]}) == D3
    assert parse_repo_digest("kimik3-test/debian-build:bookworm", {"RepoDigests": []}) is None  # docker import
    assert parse_repo_digest(RUNTIME, None) is None


def test_a_profile_may_pin_a_base_by_digest_and_a_malformed_digest_is_refused() -> None:
    pinned = parse_profile(TAGGED.replace(f"runtime: '{RUNTIME}'", f"runtime: '{RUNTIME}@{D1}'"), "p.yaml")
    assert pinned.profile.build.base_images.runtime == f"{RUNTIME}@{D1}"
    with pytest.raises(ProfileError, match="build.base_images.runtime: must be an image reference"):
        parse_profile(TAGGED.replace(f"runtime: '{RUNTIME}'", f"runtime: '{RUNTIME}@sha256:abc'"), "p.yaml")


@pytest.fixture
def world(tmp_path: Path):
    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    ports, docker = fake_ports(FakeHub("org/k3", FAKE_REVISION, FILES, tmp_path / "hub"))
    docker.base_images = {RUNTIME: "sha256:" + "1" * 64, BUILD: "sha256:" + "2" * 64}
    docker.base_digests = {RUNTIME: D1, BUILD: D2}  # pulled from a registry: RepoDigests known
    return Orchestrator(ports, NullReporter(), tmp_path, tmp_path / "Dockerfile.llamacpp"), docker


def test_the_build_records_the_digests_and_a_moved_tag_rebuilds(world) -> None:
    orchestrator, docker = world
    profile = parse_profile(TAGGED, "p.yaml")
    orchestrator.apply(profile)
    labels = dict(docker.builds[-1].labels)
    assert json.loads(labels[BASE_DIGESTS]) == {RUNTIME: D1, BUILD: D2}
    fingerprint = docker.builds[-1].fingerprint
    docker.base_images[RUNTIME], docker.base_digests[RUNTIME] = "sha256:" + "3" * 64, D3  # `docker pull` moved it
    image = next(s for s in orchestrator.plan(profile).steps if s.kind == "image")
    assert (image.action, image.reason) == (Action.CREATE, "base image tag now points to another digest: rebuild on it")
    assert [str(d) for d in image.diff] == [f"base image tag {RUNTIME}: {D1[:19]} → {D3[:19]}"]
    assert image.spec.fingerprint == fingerprint  # the profile did not change: same fingerprint, new build
    orchestrator.apply(profile)
    assert json.loads(dict(docker.builds[-1].labels)[BASE_DIGESTS])[RUNTIME] == D3
    assert not orchestrator.plan(profile).changes


def test_a_pinned_digest_is_pulled_by_digest_and_built_from_it(world) -> None:
    orchestrator, docker = world
    pinned_ref = f"{RUNTIME}@{D3}"
    profile = parse_profile(TAGGED.replace(f"runtime: '{RUNTIME}'", f"runtime: '{pinned_ref}'"), "p.yaml")
    orchestrator.apply(profile)
    assert f"pull {pinned_ref}" in docker.calls
    build = docker.builds[-1]
    assert dict(build.build_args)["RUNTIME_IMAGE"] == pinned_ref  # FROM the digest, not whatever the tag is now
    assert json.loads(dict(build.labels)["kimik3.image.inputs"])["build.base_images.runtime"] == pinned_ref
    assert json.loads(dict(build.labels)[BASE_DIGESTS])[pinned_ref] == D3


def test_an_image_built_before_digests_were_recorded_is_not_rebuilt(world) -> None:
    """Upgrading kimik3: the image has only the ids label. Its bases have not moved: nothing to do."""
    orchestrator, docker = world
    profile = parse_profile(TAGGED, "p.yaml")
    orchestrator.apply(profile)
    for image in docker.images.values():  # as an older kimik3 labelled it
        image["Config"]["Labels"].pop(BASE_DIGESTS)
        assert BASE_IMAGES in image["Config"]["Labels"]
    assert not orchestrator.plan(profile).changes
    docker.base_images[RUNTIME] = "sha256:" + "3" * 64  # ... and a re-pull still shows, by id
    image = next(s for s in orchestrator.plan(profile).steps if s.kind == "image")
    assert image.reason == "a base image was updated since the build: rebuild on it"
