"""Host facts made from outputs recorded on real hosts, through kimik3's own parsers:

    h200_host()                      # the recorded H200 host (tests/fixtures/h200): 1 GPU, 16 cores, 125 GiB RAM
    h200_host(gpus=8, ram_total=...) # the same GPU recorded once, as 8 of them (indices/UUIDs renumbered)

Plan cases use it as `observed: host: {recorded: h200, gpus: 8, ...HostFacts fields}`.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from kimik3_reconciler.model.facts import HostFacts
from kimik3_reconciler.observe.host import (
    parse_cpu_flags,
    parse_lscpu_cores,
    parse_lscpu_sockets,
    parse_meminfo,
    parse_numa_balancing,
    parse_nvml,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
H200_NVML: dict[str, Any] = json.loads((FIXTURES / "h200" / "nvml.json").read_text())
H200_HOST = (FIXTURES / "h200" / "host.txt").read_text()


def h200_section(title: str) -> str:
    """One `## title` section of tests/fixtures/h200/host.txt."""
    return H200_HOST.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def h200_nvml(gpus: int = 1) -> dict[str, Any]:
    """The recorded NVML dump with its one H200 repeated `gpus` times (index and UUID renumbered)."""
    dump = copy.deepcopy(H200_NVML)
    (gpu,) = dump["gpus"]
    dump["gpus"] = [{**copy.deepcopy(gpu), "index": i, "uuid": f"{gpu['uuid'][:-2]}{i:02d}"} for i in range(gpus)]
    return dump


def h200_host(gpus: int = 1, **overrides: Any) -> HostFacts:
    """The recorded H200 host's facts (driver 580.159.04, compute capability 9.0, 143771 MiB, AVX-512 + AMX)."""
    lscpu = h200_section("lscpu -p=CORE,SOCKET")
    found, driver = parse_nvml(h200_nvml(gpus))
    ram_total, ram_available = parse_meminfo(h200_section("meminfo"))
    facts = HostFacts(physical_cores=parse_lscpu_cores(lscpu), sockets=parse_lscpu_sockets(lscpu),
                      cpu_flags=parse_cpu_flags(h200_section("cpuinfo flags")), gpu_probe="ok",
                      driver_version=driver, gpus=found, ram_total=ram_total, ram_available=ram_available,
                      numa_balancing=parse_numa_balancing(h200_section("numa_balancing")), docker_gpus=True)
    return HostFacts.model_validate({**facts.model_dump(), **overrides})


RECORDED = {"h200": h200_host}


def recorded_host(spec: dict[str, Any]) -> HostFacts:
    """`{recorded: h200, gpus: N, field: value, ...}` -> that host's facts with the fields replaced."""
    fields = dict(spec)
    make = RECORDED[fields.pop("recorded")]
    return make(fields.pop("gpus", 1), **fields)
