"""llama.cpp's own host findings (the host gate, planning/host_gate.py, asks them through
`ServingEngine.host_findings`): the GPUs a CUDA build claims and the driver its runtime image's CUDA needs, the
image's kernels for these GPUs (build.cuda_architectures) and this CPU (build.cpu_features), and the sizing of the
quant on this host (VRAM + RAM, the draft's GPU, the context: engines/llamacpp/memory_gate.py), read from the
engine's plan (its mode decision, made once: engines/llamacpp/vram_fit.py). Pure: facts in, (refusals, warnings)
out.
"""

from __future__ import annotations

import re

from kimik3_reconciler.engines.gpus import absent_refusal, foreign_gpu_processes, requested_gpus
from kimik3_reconciler.engines.llamacpp.build_flags import CPU_FEATURES, cpu_features
from kimik3_reconciler.engines.llamacpp.host_compat import (
    arch_name,
    best_coverage,
    driver_floor,
    image_cuda_version,
)
from kimik3_reconciler.engines.llamacpp.memory_gate import context_refusals, draft_room_refusals, memory_findings
from kimik3_reconciler.engines.llamacpp.vram_fit import ModeDecision, margin_refusal
from kimik3_reconciler.errors import FieldRefusal
from kimik3_reconciler.model.driver import driver_text, version
from kimik3_reconciler.model.facts import HostFacts, Observed
from kimik3_reconciler.model.profile import Profile


def _runtime_cuda(profile: Profile, observed: Observed) -> tuple[int, int, int] | None:
    """The runtime base image's CUDA: its CUDA_VERSION env when pulled, else its tag."""
    env = {"CUDA_VERSION": observed.runtime_cuda} if observed.runtime_cuda else None
    return image_cuda_version(profile.build.base_images.runtime, env)


def _driver_refusal(profile: Profile, observed: Observed) -> str | None:
    """The driver must run the runtime base image's CUDA (seed 001: the CUDA 13 image needs R580+)."""
    host, runtime = observed.host, profile.build.base_images.runtime
    cuda = _runtime_cuda(profile, observed)
    floor, why = driver_floor(cuda)
    runs = f"; NVML: it runs CUDA <= {host.driver_cuda[0]}.{host.driver_cuda[1]}" if host.driver_cuda else ""
    # rule: driver-floor
    # Seed 001: R580+ for the CUDA 13 image; nvidia/cuda images refuse to start on an older driver
    # (their NVIDIA_REQUIRE_CUDA=cuda>=X.Y, checked by the container toolkit).
    if version(host.driver_version or "0") >= floor:
        # The driver's own word, where NVML gives it, counts too (a table row may be missing).
        if cuda and host.driver_cuda and host.driver_cuda < cuda[:2]:
            return (
                f"NVIDIA driver {host.driver_version} runs CUDA <= {host.driver_cuda[0]}.{host.driver_cuda[1]} "
                f"(NVML), older than CUDA {'.'.join(map(str, cuda))} of the runtime base image {runtime}: upgrade "
                "the driver, or set build.base_images to a CUDA the driver runs"
            )
        return None
    return (
        f"NVIDIA driver {host.driver_version} is older than {driver_text(floor)}, the minimum for the runtime "
        f"base image {runtime} ({why}{runs}): upgrade the driver, or set build.base_images to a CUDA the "
        "driver runs"
    )


def _arch_findings(profile: Profile, host: HostFacts) -> tuple[list[str], list[str]]:
    """Every requested GPU needs kernels among build.cuda_architectures: found before the build, not after the load."""
    archs = profile.build.cuda_architectures
    gpus, _ = requested_gpus(profile, host)
    groups: dict[tuple[tuple[int, int], str], list[int]] = {}
    for gpu in gpus:
        groups.setdefault((gpu.compute_capability, gpu.name), []).append(gpu.index)
    rewritten = any(re.fullmatch(r"12\d(-real|-virtual)?", a) for a in archs)
    refusals, warnings = [], []
    for (cc, name), indices in groups.items():
        which = f"GPU {indices[0]}" if len(indices) == 1 else f"GPUs {', '.join(map(str, indices))}"
        named = (
            f"{which} ({name}) {'has' if len(indices) == 1 else 'have'} compute capability {cc[0]}.{cc[1]} "
            f"(sm_{arch_name(cc)})"
        )
        coverage = best_coverage(archs, cc)
        # rule: cuda-arch-covers-gpus
        # llama.cpp CMake (reference/llama-cpp.md §3.2): a plain 12X builds 12Xa, which runs on that GPU only.
        if coverage is None:
            why = " (llama.cpp builds a plain 12X as 12Xa, for that GPU only)" if rewritten else ""
            refusals.append(
                f'{named} but build.cuda_architectures {archs} has no kernel it can run{why}: add "{arch_name(cc)}"'
            )
        elif coverage == "ptx":
            warnings.append(
                f"{named}: build.cuda_architectures {archs} gives it only PTX, compiled at every cold "
                f'start and slower than native kernels: add "{arch_name(cc)}"'
            )
    return refusals, warnings


def _gpu_refusals(profile: Profile, observed: Observed, stoppable: frozenset[int] = frozenset()) -> list[str]:
    host = observed.host
    # rule: gpus-present
    # Seed 000 step 1: nvidia-smi first (GPU count/VRAM): a CUDA profile on a host without them cannot load.
    if host.gpu_probe == "no-driver" or not host.gpus:
        floor, _ = driver_floor(_runtime_cuda(profile, observed))
        return [
            f"0 GPUs on this host ({host.gpu_probe_detail or 'NVML sees none'}): build.variant cuda needs the "
            f"NVIDIA driver (>= {driver_text(floor)}) and GPUs; use variant cpu with gpus: none for a CPU-only "
            "host"
        ]
    refusals = [r for r in (_driver_refusal(profile, observed),) if r]
    gpus, absent = requested_gpus(profile, host)
    if absent:
        refusals.append(absent_refusal(absent, host))
    twice = sorted({g.index for g in gpus if sum(h.index == g.index for h in gpus) > 1})
    if twice:
        # rule: gpus-present
        # An index and a UUID can name one GPU: it would be requested once and counted twice (fit_target, split).
        refusals.append(
            f"gpus: names GPU {', '.join(map(str, twice))} twice (by index and by UUID): list each GPU once"
        )
    refusals.extend(foreign_gpu_processes(profile, gpus, stoppable))
    fit = profile.serve.fit_target
    if isinstance(fit, list) and profile.gpus == "all" and len(fit) != len(host.gpus):
        # rule: fit-target-list
        # llama.cpp indexes --fit-target like the devices: with gpus: all only the host's count says how many.
        refusals.append(
            FieldRefusal(
                ("serve", "fit_target"),
                f"serve.fit_target lists {len(fit)} values but gpus: all is {len(host.gpus)} GPUs here",
            )
        )
    if host.docker_gpus is False:
        # rule: gpu-plumbing-probe
        # Neither CDI nor `--gpus` (runtime or hook; model/gpu_request.py): no container can get a GPU, so the probe
        # has nothing to try.
        refusals.append(
            "Docker cannot give containers GPUs: install nvidia-container-toolkit (CDI specs in /etc/cdi, "
            "the nvidia runtime, or its nvidia-container-runtime-hook on dockerd's PATH)"
        )
    return refusals


def _cpu_findings(profile: Profile, observed: Observed, mode: str) -> tuple[list[str], list[str]]:
    """AVX-512 is what the CPU experts use; AMX is irrelevant to them (seed 000), so it is not judged."""
    host = observed.host
    if not host.cpu_flags:
        return [], []  # not observed
    flags, built = set(host.cpu_flags), cpu_features(profile, host)
    missing = [f for f in built if f != "amx" and not set(CPU_FEATURES[f].host_flags) <= flags]
    # rule: cpu-features-on-host
    # Listed AVX-512 kernels are compiled into the whole CPU backend: an illegal instruction on this CPU.
    if missing:
        lacks = ", ".join(CPU_FEATURES[m].host_flags[0] for m in missing)
        return [
            f"build.cpu_features lists {', '.join(missing)} but this CPU lacks {lacks}: "
            "the image's CPU kernels would stop on an illegal instruction here; use cpu_features: auto"
        ], []
    experts_on_cpu = profile.build.variant == "cpu" or mode == "hybrid"
    # rule: avx512-experts
    # Seed 000: the hybrid's CPU experts run on AVX-512; AMX "turns out to be irrelevant to the experts".
    # An explicit list is the profile's choice (`[]`: a portable image): only `auto` on a CPU without AVX-512 warns.
    if experts_on_cpu and profile.build.cpu_features == "auto" and "avx512f" not in flags:
        return [], [
            "no AVX-512 on this CPU: the hybrid's CPU-resident experts run on AVX2 kernels, slower than the "
            "AVX-512 ones seed 000 measured (AMX does not matter for them)"
        ]
    return [], []


def host_findings(
    profile: Profile, observed: Observed, decision: ModeDecision, stoppable: frozenset[int], ours_running: bool
) -> tuple[list[str], list[str]]:
    """(refusals, warnings) of llama.cpp on this host: its GPUs and driver, its image's kernels, the quant's sizing
    in `decision`'s mode (the engine's plan), the build's CPU features. `stoppable`: pids the plan stops first
    (their GPU memory frees); `ours_running`: a kimik3 server of this host holds RAM now."""
    host = observed.host
    refusals: list[str] = []
    warnings: list[str] = []
    if profile.build.variant == "cuda" and host.gpu_probe is not None:
        refusals += _gpu_refusals(profile, observed, stoppable)
        if host.gpu_probe == "ok":
            found, cautions = _arch_findings(profile, host)
            refusals, warnings = refusals + found, warnings + cautions
    memory, caution = memory_findings(profile, observed, ours_running, decision)
    refusals += (
        memory + draft_room_refusals(profile, observed, decision) + context_refusals(profile, observed, decision)
    )
    warnings += caution
    refusals += [r for r in (margin_refusal(profile, decision),) if r]
    cpu_refusals, cpu_warnings = _cpu_findings(profile, observed, decision.mode)
    return refusals + cpu_refusals, warnings + cpu_warnings
