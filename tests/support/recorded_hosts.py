"""Host facts made from outputs recorded on real hosts, through kimik3's own parsers:

    h200_host()                      # the recorded H200 host (tests/fixtures/h200): 1 GPU, 16 cores, 125 GiB RAM
    h200_host(gpus=8, ram_total=...) # the same GPU recorded once, as 8 of them (indices/UUIDs renumbered)

Plan cases use it as `observed: host: {recorded: h200, gpus: 8, ...HostFacts fields}`.

    seed000_host()                   # seed 000's host as the seed describes it (not recorded): 8x RTX PRO 6000
                                     # (97887 MiB, sm_120), 1 TiB RAM; the CPU and driver facts are the H200 host's

Plan cases use it as `observed: host: {described: seed-000, ram_total: ...}`.
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
    facts = HostFacts(
        physical_cores=parse_lscpu_cores(lscpu),
        sockets=parse_lscpu_sockets(lscpu),
        cpu_flags=parse_cpu_flags(h200_section("cpuinfo flags")),
        gpu_probe="ok",
        driver_version=driver,
        gpus=found,
        ram_total=ram_total,
        ram_available=ram_available,
        numa_balancing=parse_numa_balancing(h200_section("numa_balancing")),
        docker_gpus=True,
    )
    return HostFacts.model_validate({**facts.model_dump(), **overrides})


# RTX PRO 6000 Blackwell Server Edition: 97887 MiB (8 of them: seed 000's "765 GiB of VRAM in total").
RTX_PRO_6000_BYTES = 97887 << 20


def seed000_host(gpus: int = 8, **overrides: Any) -> HostFacts:
    """Seed 000's host as described (8x RTX PRO 6000, 1 TiB RAM): the H200 dump with the GPUs' name, memory and
    compute capability replaced, parsed by kimik3's own parser."""
    dump = h200_nvml(gpus)
    for gpu in dump["gpus"]:
        gpu.update(
            name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
            compute_capability=[12, 0],
            memory_total=RTX_PRO_6000_BYTES,
            memory_free=RTX_PRO_6000_BYTES - (512 << 20),
            memory_used=512 << 20,
        )
    found, _ = parse_nvml(dump)
    host = h200_host(gpus, ram_total=1 << 40, ram_available=1000 << 30)
    return HostFacts.model_validate({**host.model_dump(), "gpus": found, **overrides})


RECORDED = {"h200": h200_host}
DESCRIBED = {"seed-000": seed000_host}


def recorded_host(spec: dict[str, Any]) -> HostFacts:
    """`{recorded: h200, gpus: N, field: value, ...}` (or `{described: seed-000, ...}`) -> that host's facts with
    the fields replaced."""
    fields = dict(spec)
    make = RECORDED[fields.pop("recorded")] if "recorded" in fields else DESCRIBED[fields.pop("described")]
    return make(fields.pop("gpus", 8 if make is seed000_host else 1), **fields)
