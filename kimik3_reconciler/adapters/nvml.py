"""NVML through nvidia-ml-py: one dump of the GPUs, the shape tests/fixtures/h200/nvml.json records.
A host without the NVIDIA driver is a fact ({"error": ...}: 0 GPUs), not a crash."""

from __future__ import annotations

from typing import Any


def nvml_dump() -> dict[str, Any]:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return {"driver": pynvml.nvmlSystemGetDriverVersion(),
                    # the newest CUDA the driver runs, as 13000 for 13.0 (tools/gpu_proof/run.sh records it too)
                    "cuda_driver": pynvml.nvmlSystemGetCudaDriverVersion(),
                    "gpus": [_gpu(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount())]}
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ImportError...
        return {"error": f"{type(exc).__name__}: {exc}"}


def _gpu(pynvml: Any, index: int) -> dict[str, Any]:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    return {
        "index": index, "uuid": pynvml.nvmlDeviceGetUUID(handle), "name": pynvml.nvmlDeviceGetName(handle),
        "compute_capability": list(pynvml.nvmlDeviceGetCudaComputeCapability(handle)),
        "memory_total": memory.total, "memory_free": memory.free,
        "processes": [{"pid": p.pid, "used_memory": p.usedGpuMemory}
                      for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)],
    }
