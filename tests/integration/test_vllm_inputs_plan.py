"""What kimik3 observes and plans for an `engine: vllm` profile's image and model, against real parts (issue 25
§2): the image as a pull by digest from a registry on loopback, priced from its manifest, and the model as the
safetensors checkpoint from the fixture hub, priced per kind; nothing of llama.cpp (no base images, no GGUF
layout) is looked at; an image with the digest already here is a NOOP; and `kimik3 plan` of the profile (the host
gate and launch of vllm25's branch, f8ed687..b5febb5) plans the pull and the checkpoint and no smoke test. The
steps themselves: test_image_pull_registry.py, test_checkpoint_download.py; the launch of vLLM is vllm25's
integration test."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.profiles import vllm_cpu_profile
from support.realparts import REPO_ROOT, kimik3, require_docker_and_demo_hub, write_profile
from support.registry import free_port, loopback_registry, push_random_image

from kimik3_demo.hub import FixtureHub
from kimik3_demo.prepare import CHECKPOINT_REVISION, checkpoint_repo, prepare_checkpoint_root
from kimik3_reconciler.adapters import real_ports
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.plan import Action
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.observe import observe
from kimik3_reconciler.planning.image_pull import plan_pull
from kimik3_reconciler.planning.model_step import download_spec, model_step

pytestmark = pytest.mark.docker

REPOSITORY = "kimik3-pull25/vllm-inputs"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, FixtureHub]]:
    """(image.ref by digest in a loopback registry, the fixture hub serving the tiny checkpoint)."""
    require_docker_and_demo_hub()
    root = tmp_path_factory.mktemp("hub")
    prepare_checkpoint_root(root)
    with loopback_registry(tmp_path_factory.mktemp("registry")) as registry, FixtureHub([checkpoint_repo(root)]) as hub:
        tag, digest = push_random_image(registry, REPOSITORY, tmp_path_factory.mktemp("image"))
        yield f"{tag}@{digest}", hub
        subprocess.run(["docker", "rmi", f"{registry}/{REPOSITORY}@{digest}"], capture_output=True)


def vllm_profile(work: Path, ref: str, hub_url: str) -> dict:
    return {
        **vllm_cpu_profile("k3-pull25-vllm", ref, hub_url, work, {"host": "loopback", "port": free_port()}),
        "vllm": {
            "tensor_parallel_size": 1,
            "attention_backend": None,
            "attention_config": None,
            "max_model_len": 512,
            "enforce_eager": True,
        },
    }


def observed_for(work: Path, profile: dict) -> Observed:
    """What `kimik3 plan` observes for `profile` with the real adapters (dockerd, the registry, the hub)."""
    loaded = parse_profile(yaml.safe_dump(profile), str(work / "profile.yaml")).profile
    return observe(loaded, real_ports(work / "state"), work, REPO_ROOT / "Dockerfile.llamacpp")


def test_a_vllm_profile_observes_a_pull_and_a_checkpoint(inputs: tuple[str, FixtureHub], tmp_path: Path) -> None:
    ref, hub = inputs
    seen = observed_for(tmp_path, vllm_profile(tmp_path, ref, hub.url))
    assert seen.pulled is not None and seen.pulled.image_id is None and seen.base_images == {}
    (image,) = plan_pull(seen.pulled)
    assert image.action is Action.CREATE and image.target == ref and "to pull (registry manifest" in image.cost
    assert seen.layout is None and seen.model.quant == "checkpoint"  # no GGUF header read
    model = model_step("model", seen.model, download_spec(seen.model, hub.url, "unused"))
    assert model.action is Action.CREATE and model.target.endswith("/checkpoint")
    assert "*.safetensors 2 file(s)" in model.cost


def test_an_image_with_the_digest_here_is_a_noop_in_the_plan(inputs: tuple[str, FixtureHub], tmp_path: Path) -> None:
    ref, hub = inputs
    registry, _, rest = ref.partition("/")
    by_digest = f"{registry}/{rest.split(':')[0]}@{ref.rpartition('@')[2]}"
    subprocess.run(["docker", "pull", "-q", by_digest], capture_output=True, check=True)  # pulled by hand meanwhile
    try:
        seen = observed_for(tmp_path, vllm_profile(tmp_path, ref, hub.url))
    finally:
        subprocess.run(["docker", "rmi", by_digest], capture_output=True)  # the other tests start without it
    assert seen.pulled is not None and seen.pulled.image_id is not None and seen.pulled.pull_bytes is None
    (image,) = plan_pull(seen.pulled)
    assert image.action is Action.NOOP and "nothing to pull" in image.reason


def test_kimik3_plan_of_a_vllm_profile_pulls_and_fetches_and_builds_nothing(
    inputs: tuple[str, FixtureHub], tmp_path: Path
) -> None:
    ref, hub = inputs
    write_profile(tmp_path, vllm_profile(tmp_path, ref, hub.url))
    shown = kimik3(tmp_path, "plan", "profile.yaml", "--json")
    planned = {step["kind"]: step for step in json.loads(shown.stdout)["steps"]}
    assert planned["image"]["action"] == "create" and "to pull (registry manifest" in planned["image"]["cost"]
    assert planned["image"]["spec"]["by_digest"].endswith(ref.rpartition("@")[2])
    assert planned["model"]["target"].endswith("/checkpoint") and planned["model"]["action"] == "create"
    assert "smoke" not in planned and "build" not in json.dumps(planned["image"]["spec"])


def test_a_tensor_parallel_size_that_does_not_divide_the_heads_is_refused_before_any_pull(
    inputs: tuple[str, FixtureHub], tmp_path: Path
) -> None:
    """Issue 38 item 6: the tiny checkpoint's config.json (from the fixture hub, at the pinned revision) has 4
    attention heads; vllm.tensor_parallel_size 3 is refused by `kimik3 apply` (exit 3, the field named) before the
    image is pulled or a byte of the weights is fetched."""
    ref, hub = inputs
    profile = vllm_profile(tmp_path, ref, hub.url)
    profile["vllm"]["tensor_parallel_size"] = 3
    write_profile(tmp_path, profile)
    weights_before = sum(n for path, n in hub.faults.served.items() if path.endswith(".safetensors"))
    refused = kimik3(tmp_path, "apply", "profile.yaml", check=False)
    assert refused.returncode == 3, refused.stderr
    assert (
        "vllm.tensor_parallel_size 3 does not divide the checkpoint's 4 attention heads (num_attention_heads in "
        f"config.json at {CHECKPOINT_REVISION[:12]})"
    ) in refused.stderr
    registry, _, rest = ref.partition("/")
    by_digest = f"{registry}/{rest.split(':')[0]}@{ref.rpartition('@')[2]}"
    assert subprocess.run(["docker", "image", "inspect", by_digest], capture_output=True).returncode != 0  # not pulled
    assert sum(n for path, n in hub.faults.served.items() if path.endswith(".safetensors")) == weights_before
    assert not (tmp_path / "hf-cache").exists() or not list((tmp_path / "hf-cache").rglob("*.safetensors"))
