"""In-memory fakes of the ports, for planner and orchestrator unit tests only (real parts: realparts.py): one module
per port (docker, hub, http + chat, host, state + clock, units); `fake_ports` wires them together."""

from __future__ import annotations

from pathlib import Path

from kimik3_reconciler.ports import Ports
from support.fakes.docker import FakeDocker, container_inspect
from support.fakes.host import FakeHost
from support.fakes.http import FakeChat, FakeHttp
from support.fakes.hub import FakeHub, gguf_bytes
from support.fakes.load import FakeLoad
from support.fakes.processes import FakeProcesses
from support.fakes.state import FakeClock, MemoryCache, MemoryState
from support.fakes.units import FakeUnits

__all__ = [
    "FAKE_PROFILE",
    "FAKE_REVISION",
    "FakeChat",
    "FakeClock",
    "FakeDocker",
    "FakeHost",
    "FakeHttp",
    "FakeHub",
    "FakeLoad",
    "FakeProcesses",
    "FakeUnits",
    "MemoryCache",
    "MemoryState",
    "container_inspect",
    "fake_ports",
    "gguf_bytes",
]

# The profile the orchestrator unit tests start from: CPU variant, no GPUs, a local archive, no smoke test.
FAKE_REVISION = "ab" * 20
FAKE_PROFILE = f"""
apiVersion: kimik3/v1
name: k3-test
model: {{repo: org/k3, revision: {FAKE_REVISION}, quant: UD-Q2_K_XL}}
build: {{source: mainline, variant: cpu, cpu_features: [], archive: src.tar.gz}}
gpus: none
serve: {{port: 18999, ctx_size: 4096, parallel: 2}}
gate: {{smoke: false}}
"""


def fake_ports(hub: FakeHub, cores: int = 8) -> tuple[Ports, FakeDocker]:
    docker = FakeDocker()
    return Ports(
        docker=docker,
        hub=hub,
        http=FakeHttp(docker),
        host=FakeHost(cores),
        state=MemoryState(hub.root / "state"),
        clock=FakeClock(),
        chat=FakeChat(docker),
        units=FakeUnits(docker),
        cache=MemoryCache(),
    ), docker


def fake_orchestrator(tmp_path: Path, files: dict[str, bytes], revision: str = FAKE_REVISION):  # noqa: ANN201
    """An orchestrator on fakes in `tmp_path` (a source archive and a Dockerfile there, a FakeHub serving org/k3 at
    `revision` with `files`): (Orchestrator, Ports, FakeDocker, FakeHub), the ports for a test to change."""
    from kimik3_reconciler.orchestrator import Orchestrator
    from kimik3_reconciler.steps.report import NullReporter

    (tmp_path / "src.tar.gz").write_bytes(b"source")
    (tmp_path / "Dockerfile.llamacpp").write_text("FROM scratch\n")
    hub = FakeHub("org/k3", revision, files, tmp_path / "hub")
    ports, docker = fake_ports(hub)
    return Orchestrator(ports, NullReporter(), tmp_path, tmp_path / "Dockerfile.llamacpp"), ports, docker, hub


def converged_fake(tmp_path: Path, files: dict[str, bytes]):  # noqa: ANN201 - (Orchestrator, FakeDocker, FakeHub, Profile)
    """FAKE_PROFILE applied on fakes, its quant's `files` served by a FakeHub under `tmp_path`: the converged host
    a fault test then damages."""
    from kimik3_reconciler.model.profile_source import parse_profile

    orchestrator, _, docker, hub = fake_orchestrator(tmp_path, files)
    profile = parse_profile(FAKE_PROFILE, "test.yaml")
    orchestrator.apply(profile)
    return orchestrator, docker, hub, profile
