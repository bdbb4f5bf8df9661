"""The runtime base image's CUDA version through the real Docker adapter: an image (imported from an
empty tar, ~1 s, removed after) whose Config.Env says CUDA_VERSION=12.8.1 under a tag that says nothing
sets the driver floor the host gate judges (seed 001: the CUDA version decides the driver, not a constant)."""

from __future__ import annotations

import io
import subprocess
import tarfile

import pytest
from support.observed import observed
from support.realparts import docker, require_docker_and_demo_hub
from support.recorded_hosts import h200_host

from kimik3_reconciler.adapters.docker_engine import DockerEngine
from kimik3_reconciler.model.profile_source import parse_profile
from kimik3_reconciler.observe.docker_objects import collect_runtime_cuda
from kimik3_reconciler.planning.host_gate import host_gate

pytestmark = pytest.mark.docker
REF = "k3hf-cuda-env:private-runtime"  # this branch's test image: the tag carries no CUDA version


def test_a_pulled_runtime_image_says_its_cuda_version_and_the_gate_follows_it() -> None:
    require_docker_and_demo_hub()
    empty = io.BytesIO()
    tarfile.open(fileobj=empty, mode="w").close()
    subprocess.run(
        ["docker", "import", "-c", "ENV CUDA_VERSION=12.8.1", "-", REF],
        input=empty.getvalue(),
        capture_output=True,
        check=True,
    )
    try:
        collected = collect_runtime_cuda(DockerEngine(), REF)
        assert collected == "12.8.1"
        assert collect_runtime_cuda(DockerEngine(), "k3hf-cuda-env:absent") is None  # not pulled: the tag stands
        profile = parse_profile(f"""
apiVersion: kimik3/v1
name: kimi-k3
model: {{repo: unsloth/Kimi-K3-GGUF, revision: 0123456789abcdef0123456789abcdef01234567, quant: UD-Q2_K_XL}}
build: {{source: mainline, cuda_architectures: ["90"], base_images: {{build: "{REF}", runtime: "{REF}"}}}}
gpus: [0]
""").profile
        host = h200_host(1, driver_version="565.57.01", driver_cuda=(12, 7))
        refusals, _ = host_gate(profile, observed(profile, host=host, runtime_cuda=collected))
        assert refusals[0].startswith(
            f"NVIDIA driver 565.57.01 is older than 570.124.06, the minimum for the runtime "
            f"base image {REF} (CUDA 12.8.1"
        )
    finally:
        docker("image", "rm", REF)
