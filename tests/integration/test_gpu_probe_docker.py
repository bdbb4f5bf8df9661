"""The GPU probe against the real dockerd (this machine has no GPU and no NVIDIA toolkit): both ways of
asking for GPUs fail to start, and the probe turns that into the clear refusal (exit 3, the command, the
fix), leaving no container behind. Seconds: an image already here, no container ever runs."""

from __future__ import annotations

import subprocess

import pytest
from support.fakes import FakeClock, MemoryState
from support.realparts import require_docker_and_demo_hub

from kimik3_reconciler.adapters.docker_engine import DockerEngine
from kimik3_reconciler.errors import GpuProbeFailed
from kimik3_reconciler.model.specs import GpuProbe
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.gpu_probe import probe_gpus
from kimik3_reconciler.steps.report import NullReporter

pytestmark = pytest.mark.docker
NAME = "k3bg-gpu-probe"
IMAGE = "kimik3-test/debian-build:bookworm"  # the imported base image CI makes anyway (no pull: no registry)


@pytest.mark.parametrize(
    ("request_kind", "docker_says"),
    [
        ("cdi", 'could not select device driver "cdi"'),
        ("runtime", 'could not select device driver "" with capabilities: [[gpu]]'),
    ],
)
def test_no_gpu_plumbing_is_a_clear_refusal(request_kind: str, docker_says: str) -> None:
    require_docker_and_demo_hub()
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode:
        pytest.fail(f"{IMAGE} is missing: scripts/ensure-base-image.sh makes it (CI runs it)")
    state = MemoryState()
    ports = Ports(docker=DockerEngine(), hub=None, http=None, host=None, state=state, clock=FakeClock())  # type: ignore[arg-type]
    probe = GpuProbe(
        container=NAME,
        image=IMAGE,
        gpus="all",
        gpu_request=request_kind,
        expected_gpus=1,
        record_key=f"gpu-probe/driver-x/toolkit-y/{request_kind}.json",
        driver=None,
        toolkit=None,
        labels=(("kimik3.role", "gpu-probe"),),
    )
    with pytest.raises(GpuProbeFailed) as refused:
        probe_gpus(probe, ports, NullReporter())
    message = str(refused.value)
    assert refused.value.exit_code == 3 and "failed to start" in message and docker_says in message
    flag = "--device nvidia.com/gpu=all" if request_kind == "cdi" else "--gpus all"
    assert f"`docker run --rm {flag} --entrypoint nvidia-smi {IMAGE} -L`" in message and "Fix: " in message
    assert state.read(probe.record_key) is None  # nothing recorded: the next apply probes again
    leftover = subprocess.run(["docker", "inspect", NAME], capture_output=True)
    assert leftover.returncode != 0  # the created-but-never-started container was removed
