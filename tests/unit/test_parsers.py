"""Pure parsers on recorded real outputs (tests/fixtures): docker inspect, lscpu, /proc/cpuinfo."""

from __future__ import annotations

import json
from pathlib import Path

from kimik3_reconciler.observe.docker_objects import parse_container, parse_image
from kimik3_reconciler.observe.host import parse_cpu_flags, parse_lscpu_cores

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixture(*parts: str) -> str:
    return FIXTURES.joinpath(*parts).read_text()


def test_running_container_recorded_from_dockerd() -> None:
    fact = parse_container(json.loads(fixture("docker", "container-running.json")))
    assert fact.name == "kimi-k3-demo" and fact.state == "running" and fact.exit_code is None
    assert fact.fingerprint and len(fact.fingerprint) == 16
    assert fact.inputs["serve.ubatch"] == 4096 and fact.inputs["model.quant"] == "UD-Q2_K_XL"
    assert fact.image == "kimi-k3-llamacpp:mainline-ad1de39-cpu"


def test_killed_container_recorded_from_dockerd() -> None:
    fact = parse_container(json.loads(fixture("docker", "container-killed.json")))
    assert fact.state == "exited" and fact.exit_code == 137


def test_image_recorded_from_dockerd() -> None:
    fact = parse_image(json.loads(fixture("docker", "image-cpu.json")))
    assert fact.tags == ("kimi-k3-llamacpp:mainline-ad1de39-cpu",)
    assert fact.fingerprint == fact.labels["kimik3.image.fingerprint"]
    assert json.loads(fact.labels["kimik3.image.inputs"])["build.variant"] == "cpu"


def test_hand_edited_inputs_label_does_not_crash() -> None:
    inspect = json.loads(fixture("docker", "container-running.json"))
    inspect["Config"]["Labels"]["kimik3.inputs"] = "{not json"
    assert parse_container(inspect).inputs == {}


def test_lscpu_counts_physical_cores_not_threads() -> None:
    assert parse_lscpu_cores(fixture("host", "lscpu-p-core-socket.dev-2core.txt")) == 2
    # two sockets, two hardware threads per core: 4 physical cores, 8 CPUs
    smt = "# Core,Socket\n0,0\n0,0\n1,0\n1,0\n2,1\n2,1\n3,1\n3,1\n"
    assert parse_lscpu_cores(smt) == 4
    assert parse_lscpu_cores("") == 1


def test_cpu_flags_recorded_on_the_dev_machine() -> None:
    flags = parse_cpu_flags(fixture("host", "cpuinfo-flags.dev-epyc.txt"))
    assert "avx512f" in flags and "avx2" in flags and "amx_tile" not in flags
