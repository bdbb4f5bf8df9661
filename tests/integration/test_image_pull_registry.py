"""The image by digest against a real registry on loopback (Debian's docker-registry 2.8, started by
scripts/ensure-registry.sh on a free port with its own storage) and the real dockerd: a small image built here is
pushed, removed, then planned (priced from the registry's manifest), pulled by kimik3's step, found again without a
pull; a digest the registry does not hold is refused naming image.ref. Seconds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.fakes.state import FakeClock
from support.realparts import REPO_ROOT, docker, docker_ports, require_docker_and_demo_hub
from support.registry import PAYLOAD, free_port, loopback_registry, push_random_image

from kimik3_reconciler.adapters.docker_engine import DockerEngine
from kimik3_reconciler.adapters.registry import RegistryApi
from kimik3_reconciler.errors import PermanentError
from kimik3_reconciler.model.plan import Action
from kimik3_reconciler.observe.pulled_image import collect_pulled
from kimik3_reconciler.planning.image_pull import plan_pull, pull_spec
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.image_pull import pull_image
from kimik3_reconciler.steps.report import NullReporter

pytestmark = pytest.mark.docker

REPOSITORY = "kimik3-pull25/tiny"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_docker_and_demo_hub()
    with loopback_registry(tmp_path_factory.mktemp("registry")) as running:
        yield running


@pytest.fixture(scope="module")
def pushed(registry: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(the tagged ref, its digest) of a one-file image built here, pushed and then removed from dockerd."""
    tag, digest = push_random_image(registry, REPOSITORY, tmp_path_factory.mktemp("image"))
    yield tag, digest
    subprocess.run(["docker", "rmi", f"{registry}/{REPOSITORY}@{digest}"], capture_output=True)


def _ports() -> Ports:
    return docker_ports(None, FakeClock())


def _manifest_layers(registry: str, digest: str) -> int:
    """The manifest's config and layer sizes read by hand (the registry's own answer to compare with)."""
    request = urllib.request.Request(
        f"http://{registry}/v2/{REPOSITORY}/manifests/{digest}",
        headers={
            "Accept": "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"
        },
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        manifest = json.load(answer)
    return int(manifest["config"]["size"]) + sum(int(layer["size"]) for layer in manifest["layers"])


def test_pull_by_digest_is_planned_priced_pulled_and_then_a_noop(registry: str, pushed: tuple[str, str]) -> None:
    tag, digest = pushed
    ref = f"{tag}@{digest}"
    engine = DockerEngine()
    absent = collect_pulled(ref, engine, RegistryApi())
    assert absent.image_id is None and absent.pull_bytes == _manifest_layers(registry, digest)
    assert absent.pull_bytes > PAYLOAD  # random bytes do not compress: the layer holds at least the payload
    (step,) = plan_pull(absent)
    assert step.action is Action.CREATE and step.cost.endswith(
        "to pull (registry manifest: config + layers, compressed)"
    )

    class Progress(NullReporter):
        seen: list[tuple[int, int]] = []

        def progress(self, task: str, done: int, total: int, **fields: object) -> None:
            self.seen.append((done, total))

    pull_image(step.spec, _ports(), Progress())
    assert Progress.seen and Progress.seen[-1][0] == Progress.seen[-1][1] > PAYLOAD  # the layer's bytes, to the end
    inspect = json.loads(docker("image", "inspect", f"{registry}/{REPOSITORY}@{digest}"))[0]
    assert f"{registry}/{REPOSITORY}@{digest}" in inspect["RepoDigests"]
    present = collect_pulled(ref, engine, RegistryApi())
    assert present.image_id == inspect["Id"] and present.pull_bytes is None  # the registry was not asked
    assert plan_pull(present)[0].action is Action.NOOP

    class Watched(NullReporter):
        seen: list[str] = []

        def event(self, name: str, **fields: object) -> None:
            self.seen.append(name)

    pull_image(step.spec, _ports(), Watched())
    assert Watched.seen == ["present"]


def test_a_digest_the_registry_does_not_hold_is_refused_naming_the_ref(registry: str, pushed: tuple[str, str]) -> None:
    tag, _ = pushed
    wrong = f"{tag}@sha256:{'0' * 64}"
    assert "has no manifest" in (collect_pulled(wrong, DockerEngine(), RegistryApi()).size_unknown or "")
    with pytest.raises(PermanentError) as refused:
        pull_image(pull_spec(wrong), _ports(), NullReporter())
    assert str(refused.value).startswith(f"image.ref {wrong}: pulling {registry}/{REPOSITORY}@sha256:0000")
    assert DockerEngine().inspect_image(f"{registry}/{REPOSITORY}@sha256:{'0' * 64}") is None


def test_an_unreachable_registry_leaves_the_size_unknown() -> None:
    ref = f"127.0.0.1:{free_port()}/{REPOSITORY}@sha256:{'1' * 64}"
    fact = collect_pulled(ref, DockerEngine(), RegistryApi())
    (step,) = plan_pull(fact)
    assert step.cost.startswith("unknown size (registry 127.0.0.1:") and "not reachable" in step.cost


def test_the_registry_script_is_idempotent(registry: str) -> None:
    port = registry.rpartition(":")[2]
    again = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "ensure-registry.sh"), port, "/nonexistent"],
        capture_output=True,
        text=True,
    )
    assert again.returncode == 0 and again.stdout.strip() == registry and not Path("/nonexistent").exists()


def test_a_registry_dying_mid_pull_is_said_as_dockerds_retries_and_the_pull_resumes(tmp_path: Path) -> None:
    """Issue 38 item 8: the registry died mid-pull and the progress line stood at the layer's bytes for 75 s (dockerd's
    own retries: 5, 10, 15, 20, 25 s) before the error. Now the first retry is said as it starts (layer, retry number,
    what dockerd does next) and counted down on the progress line; here the registry comes back during it and the
    pull completes."""
    root = tmp_path / "registry"
    root.mkdir()
    with loopback_registry(root) as running:
        port = running.rpartition(":")[2]
        tag, digest = push_random_image(running, "kimik3-pull38/dies", tmp_path, size=64 << 20)
        ref = f"{tag}@{digest}"

        class Dies(NullReporter):
            said: list[tuple[str, dict[str, object]]] = []
            phases: list[str] = []
            killed = False

            def progress(self, task: str, done: int, total: int, **fields: object) -> None:
                # An eighth of the layer in (the image's config, fetched first, is here by then: a registry gone
                # before it fails the config's fetch instead, which dockerd retries without a word): it dies.
                if not Dies.killed and done >= total // 8:
                    os.kill(int((root / "registry.pid").read_text()), signal.SIGKILL)
                    Dies.killed = True
                if fields.get("phase"):
                    self.phases.append(str(fields["phase"]))

            def event(self, name: str, **fields: object) -> None:
                self.said.append((name, fields))
                if name == "pull-retry":  # said within dockerd's first 5 s wait: bring the registry back
                    subprocess.run(
                        ["bash", str(REPO_ROOT / "scripts" / "ensure-registry.sh"), port, str(root)],
                        capture_output=True,
                        check=True,
                    )

        try:
            pull_image(pull_spec(ref), _ports(), Dies())
        finally:
            subprocess.run(["docker", "rmi", f"{running}/kimik3-pull38/dies@{digest}"], capture_output=True)
    names = [name for name, _ in Dies.said]
    assert names[0] == "pull" and names[-1] == "pulled" and "pull-retry" in names, names
    retry = next(fields for name, fields in Dies.said if name == "pull-retry")  # the first (a slow restart: more)
    assert retry["retry"] == 1 and retry["in_s"] == 5 and len(str(retry["layer"])) == 12
    assert str(retry["why"]).startswith(
        f"downloading layer {retry['layer']} failed (the registry stopped answering?): "
        "dockerd retries it, retry 1 of 5 by default"
    )
    assert any(p.startswith(f"layer {retry['layer']} failed, dockerd retries it in ") for p in Dies.phases), Dies.phases
