"""A host described in a file instead of observed (`kimik3 routes --host-facts FILE`): the GPUs, RAM and driver
of a machine one has not got yet, or not here. Pure: the loaded YAML/JSON data in, `HostFacts` out; a bad field
is an `InputError` naming it (exit 2).

    gpus:                               # absent or [] = no GPU
      - {name: NVIDIA B300, count: 8, memory_gib: 268}   # or memory_bytes; compute_capability: [10, 3] optional
    ram_gib: 2048                       # or ram_bytes
    driver: "580.95.05"                 # the NVIDIA driver; absent = none
"""

from __future__ import annotations

from typing import Any

from kimik3_reconciler.errors import InputError
from kimik3_reconciler.model.facts import GpuFact, HostFacts

GIB = 1 << 30
_TOP = ("gpus", "ram_gib", "ram_bytes", "driver")
_GPU = ("name", "count", "memory_gib", "memory_bytes", "compute_capability")


def _number(value: Any, where: str, source: str, integer: bool = False) -> float:
    # bool is an int to Python: `count: yes` must not read as one GPU.
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or value <= 0
        or (integer and not isinstance(value, int))
    ):
        kind = "a positive whole number" if integer else "a positive number"
        raise InputError(f"{source}: {where}: must be {kind}, got {value!r}")
    return value


def _bytes(data: dict[str, Any], stem: str, where: str, source: str) -> int:
    if f"{stem}_gib" in data and f"{stem}_bytes" in data:
        raise InputError(f"{source}: {where}{stem}_gib and {where}{stem}_bytes: give one of them")
    if f"{stem}_bytes" in data:
        return int(_number(data[f"{stem}_bytes"], f"{where}{stem}_bytes", source, integer=True))
    if f"{stem}_gib" in data:
        return int(_number(data[f"{stem}_gib"], f"{where}{stem}_gib", source) * GIB)
    raise InputError(f"{source}: {where}{stem}_gib: required (or {where}{stem}_bytes)")


def _unknown(data: dict[str, Any], known: tuple[str, ...], where: str, source: str) -> None:
    extra = sorted(set(data) - set(known))
    if extra:
        raise InputError(f"{source}: {where}{extra[0]}: not a field of a described host (fields: {', '.join(known)})")


def described_host(data: Any, source: str) -> HostFacts:
    """The facts of a described host; `source` names the file in errors."""
    if not isinstance(data, dict):
        raise InputError(f"{source}: a described host is a mapping with {', '.join(_TOP)}")
    _unknown(data, _TOP, "", source)
    gpus: list[GpuFact] = []
    listed = data.get("gpus") or []
    if not isinstance(listed, list):
        raise InputError(f"{source}: gpus: must be a list of {{name, count, memory_gib}}")
    for i, entry in enumerate(listed):
        where = f"gpus[{i}]."
        if not isinstance(entry, dict):
            raise InputError(f"{source}: gpus[{i}]: must be a mapping {{name, count, memory_gib}}")
        _unknown(entry, _GPU, where, source)
        name = entry.get("name")
        if not isinstance(name, str) or not name.strip():
            raise InputError(f"{source}: {where}name: required, the GPU's name as nvidia-smi prints it")
        count = int(_number(entry.get("count", 1), f"{where}count", source, integer=True))
        memory = _bytes(entry, "memory", where, source)
        capability = entry.get("compute_capability", [0, 0])
        if not (
            isinstance(capability, list)
            and len(capability) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in capability)
        ):
            raise InputError(f"{source}: {where}compute_capability: must be [major, minor], e.g. [10, 3]")
        for _ in range(count):
            n = len(gpus)
            gpus.append(
                GpuFact(
                    index=n,
                    uuid=f"described-{n}",
                    name=name,
                    compute_capability=tuple(capability),
                    memory_total=memory,
                    memory_free=memory,
                )
            )
    driver = data.get("driver")
    if driver is not None and not (isinstance(driver, str) and driver[:1].isdigit()):
        raise InputError(f'{source}: driver: must be a version as nvidia-smi prints it (quoted), e.g. "580.95.05"')
    ram = _bytes(data, "ram", "", source)
    return HostFacts(
        gpus=tuple(gpus),
        ram_total=ram,
        ram_available=ram,
        driver_version=driver,
        gpu_probe="ok" if driver else "no-driver",
    )
