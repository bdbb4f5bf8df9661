"""`kimik3 plan` of an `engine: vllm` profile against real parts (issue 25 §2): the image is planned as a pull by
digest from a registry on loopback, priced from its manifest, and the model as the safetensors checkpoint from
the fixture hub, priced per kind; nothing of llama.cpp (no build, no GGUF layout) is planned; an image with the
digest already here is a NOOP. The steps themselves: test_image_pull_registry.py, test_checkpoint_download.py; the
launch of vLLM is vllm25's integration test."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.realparts import kimik3, require_docker_and_demo_hub, write_profile
from support.registry import free_port, loopback_registry, push_random_image

from kimik3_demo.hub import FixtureHub
from kimik3_demo.prepare import CHECKPOINT_REPO, CHECKPOINT_REVISION, checkpoint_repo, prepare_checkpoint_root

from kimik3_reconciler.model.engine_names import ENGINES

pytestmark = [pytest.mark.docker,
              pytest.mark.skipif("vllm" not in ENGINES, reason="engine: vllm is not in the registry on this branch")]

REPOSITORY = "kimik3-pull25/vllm-inputs"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, FixtureHub]]:
    """(image.ref by digest in a loopback registry, the fixture hub serving the tiny checkpoint)."""
    require_docker_and_demo_hub()
    root = tmp_path_factory.mktemp("hub")
    prepare_checkpoint_root(root)
    with loopback_registry(tmp_path_factory.mktemp("registry")) as registry, \
            FixtureHub([checkpoint_repo(root)]) as hub:
        tag, digest = push_random_image(registry, REPOSITORY, tmp_path_factory.mktemp("image"))
        yield f"{tag}@{digest}", hub
        subprocess.run(["docker", "rmi", f"{registry}/{REPOSITORY}@{digest}"], capture_output=True)


def vllm_profile(work: Path, ref: str, hub_url: str) -> dict:
    return {"apiVersion": "kimik3/v1", "name": "k3-pull25-vllm", "engine": "vllm",
            "model": {"repo": CHECKPOINT_REPO, "revision": CHECKPOINT_REVISION, "endpoint": hub_url,
                      "cache_dir": str(work / "hf-cache")},
            "image": {"ref": ref}, "gpus": "none",
            "serve": {"host": "loopback", "port": free_port()},
            "vllm": {"tensor_parallel_size": 1, "attention_backend": None, "attention_config": None,
                     "max_model_len": 512, "enforce_eager": True}}


def steps(work: Path) -> dict[str, dict]:
    shown = kimik3(work, "plan", "profile.yaml", "--json", check=False)
    assert shown.returncode in (0, 4), shown.stderr
    return {step["kind"]: step for step in json.loads(shown.stdout)["steps"]}


def test_a_vllm_profile_plans_a_pull_and_a_checkpoint(inputs: tuple[str, FixtureHub], tmp_path: Path) -> None:
    ref, hub = inputs
    write_profile(tmp_path, vllm_profile(tmp_path, ref, hub.url))
    planned = steps(tmp_path)
    image, model = planned["image"], planned["model"]
    assert image["action"] == "create" and image["target"] == ref
    assert "to pull (registry manifest" in image["cost"] and "pull " in image["reason"]
    assert model["action"] == "create" and model["target"].endswith("/checkpoint")
    assert "*.safetensors 2 file(s)" in model["cost"]
    assert "smoke" not in planned and "preread" not in planned  # nothing of llama.cpp's build or GGUF


def test_an_image_with_the_digest_here_is_a_noop_in_the_plan(inputs: tuple[str, FixtureHub], tmp_path: Path) -> None:
    ref, hub = inputs
    registry, _, rest = ref.partition("/")
    by_digest = f"{registry}/{rest.split(':')[0]}@{ref.rpartition('@')[2]}"
    subprocess.run(["docker", "pull", "-q", by_digest], capture_output=True, check=True)  # pulled by hand meanwhile
    write_profile(tmp_path, vllm_profile(tmp_path, ref, hub.url))
    image = steps(tmp_path)["image"]
    assert image["action"] == "noop" and "nothing to pull" in image["reason"]
