"""The cmake configure arguments of an image build: one function, used by Dockerfile.llamacpp
(through the CMAKE_ARGS build arg) and by native builds on GPU hosts, so both compile alike."""

from __future__ import annotations

import re
from typing import NamedTuple

from kimik3_reconciler.errors import PlanError
from kimik3_reconciler.model.facts import HostFacts
from kimik3_reconciler.model.profile import Profile


class CpuFeature(NamedTuple):
    switches: tuple[str, ...]  # the ggml CMake switches it turns on (reference/llama-cpp.md §3.2)
    host_flags: tuple[str, ...]  # the /proc/cpuinfo flags it needs (`cpu_features: auto` picks it when all are there)


# profile cpu_features name -> what it compiles and what the CPU must have
CPU_FEATURES = {
    "avx512": CpuFeature(("GGML_AVX512",), ("avx512f",)),
    "avx512_vbmi": CpuFeature(("GGML_AVX512_VBMI",), ("avx512vbmi",)),
    "avx512_vnni": CpuFeature(("GGML_AVX512_VNNI",), ("avx512_vnni",)),
    "avx512_bf16": CpuFeature(("GGML_AVX512_BF16",), ("avx512_bf16",)),
    "amx": CpuFeature(("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16"), ("amx_tile", "amx_int8", "amx_bf16")),
}
# CMAKE_ARGS is expanded unquoted in the Dockerfile's RUN (word splitting only, never re-parsed
# as shell syntax); this pattern keeps every item free of spaces, quotes, globs and `$`.
_SAFE_ITEM = re.compile(r"^-D[A-Z0-9_]+=[A-Za-z0-9_.;,=:/+-]*$")


def cpu_features(profile: Profile, host: HostFacts) -> tuple[str, ...]:
    """The CPU kernels to compile: the profile's list, or what the host has (`auto`)."""
    if profile.build.cpu_features != "auto":
        return tuple(sorted(profile.build.cpu_features))
    flags = set(host.cpu_flags)
    return tuple(sorted(name for name, feature in CPU_FEATURES.items() if set(feature.host_flags) <= flags))


def cmake_definitions(profile: Profile, host: HostFacts) -> dict[str, str]:
    """Every -D the build sets, by name (ordered as passed)."""
    build = profile.build
    cuda = build.variant == "cuda"
    features = cpu_features(profile, host)
    defs = {
        "CMAKE_BUILD_TYPE": "Release",
        # The image must carry the kernels the profile asks for, not the build machine's.
        "GGML_NATIVE": "OFF",
        "GGML_CUDA": "ON" if cuda else "OFF",
        # Every image carries the RPC backend and rpc-server (issue 18): one image per pin for the
        # main server and its workers, whether or not this profile has workers; the backend is
        # inert until llama-server is given --rpc.
        "GGML_RPC": "ON",
    }
    if cuda:
        defs["CMAKE_CUDA_ARCHITECTURES"] = ";".join(build.cuda_architectures)
        # The CUDA driver stub is absent at build time; libcuda is resolved at run time.
        defs["CMAKE_EXE_LINKER_FLAGS"] = "-Wl,--allow-shlib-undefined"
    for name, feature in CPU_FEATURES.items():
        for switch in feature.switches:
            defs[switch] = "ON" if name in features else "OFF"
    defs.update(
        {
            "LLAMA_BUILD_TESTS": "OFF",
            "LLAMA_BUILD_EXAMPLES": "OFF",
            "LLAMA_BUILD_APP": "OFF",
            # The UI step would fetch assets from the network.
            "LLAMA_BUILD_UI": "OFF",
            "LLAMA_USE_PREBUILT_UI": "OFF",
            "LLAMA_OPENSSL": "OFF",
            # Baked in so /props and system_fingerprint say which source the image holds.
            "LLAMA_BUILD_NUMBER": str(build.effective_build_number),
            "LLAMA_BUILD_COMMIT": build.effective_commit[:7],
        }
    )
    return defs


def cmake_configure_args(profile: Profile, host: HostFacts) -> tuple[str, ...]:
    args = tuple(f"-D{k}={v}" for k, v in cmake_definitions(profile, host).items())
    unsafe = [a for a in args if not _SAFE_ITEM.match(a)]
    if unsafe:
        # rule: build-args-safe
        # Profile fields never become shell text: a value with shell or cmake metacharacters is refused.
        raise PlanError(f"refusing cmake arguments with unsafe characters: {unsafe}")
    return args


def docker_build_args(profile: Profile, host: HostFacts) -> dict[str, str]:
    """The build args of Dockerfile.llamacpp: base images and the cmake arguments."""
    return {
        "BUILD_IMAGE": profile.build.base_images.build,
        "RUNTIME_IMAGE": profile.build.base_images.runtime,
        "CMAKE_ARGS": " ".join(cmake_configure_args(profile, host)),
    }
