"""A vLLM deployment's checkpoint reaches the container read-only (issue 25 §2): the repo's cache folder is mounted
read-only (its snapshot links point into blobs/ beside it), the server opens the snapshot at the pinned revision,
and the container gets no hub token and no hub address. Pure: render_launch of an engine: vllm profile."""

from __future__ import annotations

from support.observed import observed

from kimik3_reconciler.model.facts import ModelFact, RemoteFile
from kimik3_reconciler.model.model_files import CHECKPOINT
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.planning.launch import render_launch

REV = "c4ec4b02" * 5
DIGEST = "sha256:" + "1" * 64
PROFILE = f"""
apiVersion: kimik3/v1
name: k3-vllm
engine: vllm
model: {{repo: kimik3-demo/Llama-tiny-random, revision: {REV}, cache_dir: /var/lib/kimik3/hub}}
image: {{ref: "127.0.0.1:5000/kimik3-test/vllm-cpu:0.32.0@{DIGEST}"}}
gpus: none
vllm: {{tensor_parallel_size: 1}}
"""


def test_the_checkpoint_is_mounted_read_only_and_opened_at_the_revision() -> None:
    profile = parse_profile(PROFILE).profile
    model = ModelFact(
        repo=profile.model.repo,
        revision=REV,
        quant=CHECKPOINT,
        cache_dir="/var/lib/kimik3/hub",
        files=(RemoteFile(path="model.safetensors", size=10, sha256="a" * 64),),
    )
    spec = render_launch(profile, observed(profile, model=model), profile.image.ref, DIGEST).spec
    repo_dir = "/var/lib/kimik3/hub/models--kimik3-demo--Llama-tiny-random"
    (mount,) = (m for m in spec.mounts if m.source == repo_dir)
    assert mount.read_only
    snapshot = f"{mount.target}/snapshots/{REV}"
    assert any(arg == snapshot or arg.startswith(snapshot + "/") for arg in spec.command), spec.command
    env = dict(spec.env)
    assert not {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT"} & set(env)
    assert all(m.read_only for m in spec.mounts)
