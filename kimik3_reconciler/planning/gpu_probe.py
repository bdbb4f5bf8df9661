"""Plan the GPU probe: before anything is downloaded, built or launched, a real container must see the
profile's GPUs (seed 000 step 1: `docker run --rm --device nvidia.com/gpu=all --entrypoint nvidia-smi …`).

Which way containers ask (CDI devices or `--gpus`) is decided by model/gpu_request.py, as for a cluster node's
members. A CDI spec file, a registered runtime or the toolkit's hook says the toolkit was installed, not that it
works: a stale CDI spec after a driver upgrade, or a daemon that ignores CDI, passes that look and fails the first
launch, after a download of hundreds of GB. The probe runs once per (driver, toolkit, request, GPUs) and is recorded;
the CPU variant (`gpus: none`) never probes.
"""

from __future__ import annotations

from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.facts import Observed
from kimik3_reconciler.model.gpu_request import head_request, missing
from kimik3_reconciler.model.labels import PROFILE_LABEL
from kimik3_reconciler.model.plan import Action, Step
from kimik3_reconciler.model.records import gpu_probe_key
from kimik3_reconciler.model.specs import GpuProbe
from kimik3_reconciler.planning.desired import Desired
from kimik3_reconciler.planning.launch import gpus_of

_HOW = {"cdi": "CDI", "runtime": "the nvidia runtime"}


def docker_flags(gpus: str | tuple[str, ...], request: str) -> str:
    """What the request is in `docker run` terms, for people reading the plan."""
    ids = ("all",) if gpus == "all" else tuple(gpus)
    if request == "cdi":
        return " ".join(f"--device nvidia.com/gpu={i}" for i in ids)
    return "--gpus all" if gpus == "all" else f"--gpus device={','.join(ids)}"


def render_probe(desired: Desired, observed: Observed) -> GpuProbe | None:
    """The probe of this profile's GPUs, or None when there is nothing to probe (CPU variant, not observed)."""
    profile, plumbing = desired.profile, observed.gpu_plumbing
    gpus = gpus_of(profile)
    if gpus == "none" or plumbing is None:
        return None
    request = head_request(plumbing, gpus)
    if request is None:
        # rule: gpu-plumbing-probe
        # Neither way is shown (the same decision as a cluster node's): the first launch would fail after a download.
        cdi = missing(plumbing, "cdi", gpus, here=True)
        runtime = missing(plumbing, "runtime", gpus, here=True) or ""
        raise PlanError(
            f"gpus: Docker cannot give containers GPUs here: it has {cdi}; nor {runtime.removeprefix('no ')}"
        )
    # Any local image will do (the toolkit injects nvidia-smi): the profile's own if built, else its runtime base.
    build = desired.build
    built = build is not None and any(build.tag in image.tags for image in observed.images)
    image = build.tag if build is not None and built else profile.build.base_images.runtime
    host = observed.host
    expected = len(host.gpus) if gpus == "all" else len(gpus)
    return GpuProbe(
        container=f"{profile.name}-gpu-probe",
        image=image,
        gpus=gpus,
        gpu_request=request,
        expected_gpus=expected,
        driver=host.driver_version,
        toolkit=plumbing.toolkit_version,
        record_key=gpu_probe_key(host.driver_version, plumbing.toolkit_version, request, gpus, len(host.gpus)),
        labels=((PROFILE_LABEL, profile.name), ("kimik3.role", "gpu-probe")),
    )


def plan_gpu_probe(desired: Desired, observed: Observed, planned: tuple[Step, ...] = ()) -> tuple[Step, ...]:
    probe = render_probe(desired, observed)
    if probe is None:
        return ()
    how = f"{_HOW[probe.gpu_request]} ({docker_flags(probe.gpus, probe.gpu_request)})"
    versions = f"driver {probe.driver or 'unknown'}, toolkit {probe.toolkit or 'unknown'}"
    record = observed.gpu_probe_record
    if record is not None:
        return (
            Step(
                "gpu",
                how,
                Action.NOOP,
                f"containers get GPUs through {how}: probed on {record.get('date')} ({versions}; {record.get('seen')})",
                spec=probe,
            ),
        )
    # rule: gpu-plumbing-probe
    # Seed 000 step 1: GPU containers must be seen to work before a download of hundreds of GB or a build.
    return (
        Step(
            "gpu",
            how,
            Action.READ,
            f"prove containers get GPUs through {how} before anything else runs: nvidia-smi in a container "
            f"(once per {versions})",
            spec=probe,
            cost="seconds",
        ),
    )
