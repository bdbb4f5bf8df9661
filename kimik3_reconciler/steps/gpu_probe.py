"""GPU probe executor: `nvidia-smi -L` in a throw-away container with the profile's GPUs, requested as
the launch requests them (CDI devices or `--gpus`); a pass is recorded, a failure refuses the host."""

from __future__ import annotations

import re

from kimik3_reconciler.errors import GpuProbeFailed, PermanentError
from kimik3_reconciler.model.specs import ContainerSpec, GpuProbe
from kimik3_reconciler.planning.gpu_probe import docker_flags
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.report import Reporter

PROBE_TIMEOUT_S = 120.0
_GPU_LINE = re.compile(r"^GPU \d+: .*\(UUID: (GPU-[0-9a-fA-F-]+)\)", re.M)

_FIX = {
    "cdi": "regenerate the CDI spec for this driver (`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`) and "
    "check that dockerd reads CDI specs (Docker >= 25 with the cdi feature; on by default from 28)",
    # `--gpus` goes through moby's nvidia device driver, registered only when dockerd starts with the toolkit's hook
    # on its PATH (daemon/devices_nvidia_linux.go): a toolkit installed after dockerd started needs the restart.
    "runtime": "restart dockerd where the toolkit was installed after it started (`--gpus` goes through "
    "nvidia-container-runtime-hook, which dockerd looks for on its PATH when it starts; `could not select device "
    'driver "" with capabilities: [[gpu]]` says it found none), else install nvidia-container-toolkit and register '
    "its runtime (`nvidia-ctk runtime configure --runtime=docker`, then restart dockerd), or generate a CDI spec "
    "(`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`)",
}


def parse_gpu_listing(stdout: str) -> tuple[str, ...]:
    """The GPU UUIDs `nvidia-smi -L` listed ("GPU 0: NVIDIA H200 (UUID: GPU-…)")."""
    return tuple(_GPU_LINE.findall(stdout))


def _refuse(probe: GpuProbe, what: str, detail: str = "") -> GpuProbeFailed:
    command = f"docker run --rm {docker_flags(probe.gpus, probe.gpu_request)} --entrypoint nvidia-smi {probe.image} -L"
    tail = f"\n{detail.strip()}" if detail.strip() else ""
    return GpuProbeFailed(
        f"containers cannot use the GPUs on this host: `{command}` {what}. Nothing was changed. "
        f"Fix: {_FIX.get(probe.gpu_request, _FIX['runtime'])}.{tail}"
    )


def probe_gpus(probe: GpuProbe, ports: Ports, reporter: Reporter) -> None:
    if ports.docker.image_id(probe.image) is None:
        reporter.event("pull", image=probe.image)
        ports.docker.pull_image(probe.image)
    spec = ContainerSpec(
        name=probe.container,
        image=probe.image,
        entrypoint=("nvidia-smi",),
        command=("-L",),
        env=(),
        mounts=(),
        gpus=probe.gpus,
        labels=probe.labels,
        restart_policy="no",
        gpu_request=probe.gpu_request,
    )
    try:
        code, out, err = ports.docker.run_to_completion(spec, PROBE_TIMEOUT_S)
    except PermanentError as exc:  # dockerd refused the device request (no driver for it, unknown CDI device)
        raise _refuse(probe, "failed to start", str(exc)) from exc
    seen = parse_gpu_listing(out)
    if code != 0:
        raise _refuse(probe, f"exited {code}", err or out)
    if len(seen) != probe.expected_gpus:
        raise _refuse(probe, f"listed {len(seen)} GPU(s), the profile asks for {probe.expected_gpus}", out)
    ports.state.write(
        probe.record_key,
        {
            "passed": True,
            "request": probe.gpu_request,
            "driver": probe.driver,
            "toolkit": probe.toolkit,
            "image": probe.image,
            "seen": f"{len(seen)} GPU(s): {', '.join(seen)}",
            "date": ports.clock.now().isoformat(timespec="seconds"),
        },
    )
    reporter.event("gpu-probe-passed", request=probe.gpu_request, gpus=len(seen))
