"""Will the image run on this host's driver and GPUs? Two checks the build cannot make for itself.

- The driver floor follows the runtime base image's CUDA version (seed 001: the CUDA 13 image needs
  R580+; seed 000's ">= 570" is the floor of its CUDA 12.8 era). nvidia/cuda images carry
  NVIDIA_REQUIRE_CUDA=cuda>=X.Y, so the container toolkit refuses to start them on an older driver.
- The GPUs' compute capability must be among `build.cuda_architectures`, as llama.cpp's CMake
  builds them (reference/llama-cpp.md §3.2): a plain 12X becomes 12Xa (arch-specific, no PTX that a
  later GPU could JIT), so an sm_120 image has no kernel an H200 (sm_90) can run — found only after
  a build and a ~17-minute load otherwise.
Pure; the host gate calls both.
"""

from __future__ import annotations

import re
from typing import Literal

# NVIDIA CUDA Toolkit Release Notes, "CUDA Toolkit and Corresponding Driver Versions" (Table 3,
# Linux x86_64, "Toolkit Driver Version"): https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/
# The minimum driver of each toolkit release; a release between two rows needs the lower row's.
TOOLKIT_DRIVER: tuple[tuple[tuple[int, int, int], tuple[int, ...]], ...] = (
    ((11, 8, 0), (520, 61, 5)),
    ((12, 0, 0), (525, 60, 13)),
    ((12, 1, 0), (530, 30, 2)),
    ((12, 2, 0), (535, 54, 3)),
    ((12, 3, 0), (545, 23, 6)),
    ((12, 4, 0), (550, 54, 14)),
    ((12, 5, 0), (555, 42, 2)),
    ((12, 6, 0), (560, 28, 3)),
    ((12, 8, 0), (570, 26)),
    ((12, 8, 1), (570, 124, 6)),
    ((12, 9, 0), (575, 51, 3)),
    ((12, 9, 1), (575, 57, 8)),
    ((13, 0, 0), (580, 65, 6)),
    ((13, 0, 1), (580, 82, 7)),
    ((13, 0, 2), (580, 95, 5)),
    ((13, 1, 0), (590, 44, 1)),
)
SEED_MIN_DRIVER = (570,)  # seed 000: "the NVIDIA driver (>=570, open kernel module)"


def cuda_text(v: tuple[int, ...]) -> str:
    return ".".join(map(str, v))


def image_cuda_version(ref: str, env: dict[str, str] | None = None) -> tuple[int, int, int] | None:
    """The CUDA version of a base image: its CUDA_VERSION env when inspected, else the nvidia/cuda tag
    (`nvidia/cuda:13.0.0-runtime-ubuntu24.04` -> (13, 0, 0)); None when neither says."""
    text = (env or {}).get("CUDA_VERSION")
    if text is None:
        name, _, tag = ref.split("@", 1)[0].rpartition(":")
        text = tag if name and "/" not in tag else ""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return (int(match[1]), int(match[2]), int(match[3] or 0)) if match else None


def driver_floor(cuda: tuple[int, int, int] | None) -> tuple[tuple[int, ...], str]:
    """(the minimum driver, why) for an image of this CUDA version; seed 000's 570 when it is unknown."""
    if cuda is None:
        return SEED_MIN_DRIVER, "seed 000's floor; the base image's CUDA version is unknown"
    rows = [driver for toolkit, driver in TOOLKIT_DRIVER if toolkit <= cuda]
    if not rows:
        return SEED_MIN_DRIVER, f"seed 000's floor (CUDA {cuda_text(cuda)} predates the table)"
    newest = TOOLKIT_DRIVER[-1][0]
    newer = f", newer than the table's {cuda_text(newest)}: at least" if cuda > newest else ""
    return max(rows[-1], SEED_MIN_DRIVER), f"CUDA {cuda_text(cuda)}{newer}, per NVIDIA's toolkit/driver table"


Coverage = Literal["sass", "ptx"] | None


def arch_coverage(entry: str, capability: tuple[int, int]) -> Coverage:
    """Does one CMAKE_CUDA_ARCHITECTURES entry give a GPU of `capability` a kernel, as llama.cpp builds it?

    "sass": machine code it runs; "ptx": only PTX, JIT-compiled at load; None: nothing it can run."""
    if entry in ("all", "all-major", "native"):
        return "sass"  # every architecture, every major's X0 (runs on X.y), or the build machine's own GPUs
    match = re.fullmatch(r"(\d{2,3})([af]?)(-real|-virtual)?", entry)
    if match is None:
        return None
    major, minor = divmod(int(match[1]), 10)
    suffix, kind = match[2], match[3] or ""
    if major == 12 and not suffix:
        suffix = "a"  # llama.cpp rewrites a plain 12X to 12Xa (Blackwell FP4 MMA), arch-specific
    if suffix == "a":
        return "sass" if capability == (major, minor) else None  # neither forward- nor family-compatible
    same_family = capability[0] == major and capability[1] >= minor
    if suffix == "f" or kind == "-real":
        return "sass" if same_family else None
    if same_family and kind != "-virtual":
        return "sass"
    return "ptx" if capability >= (major, minor) else None


def best_coverage(entries: list[str], capability: tuple[int, int]) -> Coverage:
    found = {arch_coverage(e, capability) for e in entries}
    return "sass" if "sass" in found else "ptx" if "ptx" in found else None


def arch_name(capability: tuple[int, int]) -> str:
    return f"{capability[0]}{capability[1]}"
