"""NVML through nvidia-ml-py: one dump of the GPUs, the shape tests/fixtures/h200/nvml.json records.
A host without the NVIDIA driver is a fact ({"error": ...}: 0 GPUs), not a crash."""

from __future__ import annotations

import sys
from typing import Any

# pynvml's first step on Linux, and its error when that fails (tests/unit/cli/test_import_costs.py compares them).
LIBRARY = "libnvidia-ml.so.1"
LIBRARY_NOT_FOUND = "NVMLError_LibraryNotFound: NVML Shared Library Not Found"


def _library_loads() -> bool:
    """Can the NVML library be loaded? Asked first with ctypes alone: pynvml's import (~25 ms of ctypes
    structures) is paid only where there is a library to talk to, not on every plan of a CPU host."""
    import ctypes

    try:
        ctypes.CDLL(LIBRARY)
    except OSError:
        return False
    return True


def nvml_dump() -> dict[str, Any]:
    if sys.platform.startswith("linux") and not _library_loads():
        return {"error": LIBRARY_NOT_FOUND}  # what pynvml.nvmlInit() raises here, word for word
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return {
                "driver": pynvml.nvmlSystemGetDriverVersion(),
                # the newest CUDA the driver runs, as 13000 for 13.0 (tools/gpu_proof/run.sh records it too)
                "cuda_driver": pynvml.nvmlSystemGetCudaDriverVersion(),
                "gpus": [_gpu(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount())],
            }
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ImportError...
        return {"error": f"{type(exc).__name__}: {exc}"}


def _gpu(pynvml: Any, index: int) -> dict[str, Any]:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    return {
        "index": index,
        "uuid": pynvml.nvmlDeviceGetUUID(handle),
        "name": pynvml.nvmlDeviceGetName(handle),
        "compute_capability": list(pynvml.nvmlDeviceGetCudaComputeCapability(handle)),
        "memory_total": memory.total,
        "memory_free": memory.free,
        "processes": [
            {"pid": p.pid, "used_memory": p.usedGpuMemory} for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        ],
    }
