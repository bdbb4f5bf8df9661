"""Issue 27 item 7 against the real dockerd: the image executor (steps/image.build_image on the real Docker
adapter and state files) records a build whose RUN ran as a full compile and the same build again, answered by
Docker's layer cache, as a cached one: the classifier reads the log real Docker streams (the RUN's output, or
` ---> Using cache`). The RUN prints cmake's progress lines instead of compiling llama.cpp (minutes to an hour);
seconds, on the imported base image CI makes anyway."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest
from support.realparts import docker_ports, require_docker_and_demo_hub

from kimik3_reconciler.adapters.state_files import StateFiles, SystemClock
from kimik3_reconciler.model.records import build_time_key
from kimik3_reconciler.model.specs import ImageBuild
from kimik3_reconciler.steps.image import build_image
from kimik3_reconciler.steps.report import NullReporter

pytestmark = pytest.mark.docker
BASE = "kimik3-test/debian-build:bookworm"
TAG = "kimik3-buildtime-27b:test"  # this test's only image
DOCKERFILE = """ARG BUILD_IMAGE
FROM ${BUILD_IMAGE}
ARG STAMP
RUN echo "$STAMP" > /stamp && printf '[ 50%%] Building C object ggml/src/ggml.c.o\\n[100%%] Linking CXX executable bin/llama-server\\n'
"""


def test_a_compile_and_a_layer_cache_build_are_recorded_apart(tmp_path: Path) -> None:
    require_docker_and_demo_hub()
    if subprocess.run(["docker", "image", "inspect", BASE], capture_output=True).returncode:
        pytest.fail(f"{BASE} is missing: scripts/ensure-base-image.sh makes it (CI runs it)")
    (tmp_path / "Dockerfile.llamacpp").write_text(DOCKERFILE)
    (tmp_path / "source.tar.gz").write_bytes(b"unused by this Dockerfile")
    state = StateFiles(tmp_path / "state")
    ports = docker_ports(state, SystemClock())
    stamp = uuid.uuid4().hex  # a RUN no earlier build cached
    spec = ImageBuild(
        TAG,
        "fp-buildtime",
        "mainline",
        "ad1de39",
        str(tmp_path / "Dockerfile.llamacpp"),
        str(tmp_path / "source.tar.gz"),
        None,
        (),
        (("BUILD_IMAGE", BASE), ("RUNTIME_IMAGE", BASE), ("STAMP", stamp)),
        (("kimik3.image.fingerprint", "fp-buildtime"),),
        variant="cpu",
    )
    try:
        build_image(spec, ports, NullReporter())
        full = state.read(build_time_key("cpu", cached=False))
        assert full is not None and full["seconds"] > 0 and full["fingerprint"] == "fp-buildtime"
        assert state.read(build_time_key("cpu", cached=True)) is None
        build_image(spec, ports, NullReporter())  # the same inputs: every step from the layer cache
        assert state.read(build_time_key("cpu", cached=False)) == full  # the compile's figure stands
        cached = state.read(build_time_key("cpu", cached=True))
        assert cached is not None and cached["seconds"] >= 0
    finally:
        subprocess.run(["docker", "rmi", "-f", TAG], capture_output=True)
