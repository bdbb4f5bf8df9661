"""kimik3's helper processes (the exporter, the front) started as apply starts them (the steps, the real process
adapter) while the apply holds HF_TOKEN: the live process's /proc/PID/environ holds only what it reads (issue 38
item 1; before, both inherited the apply's whole environment, the token included)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.ports import free_port

from kimik3_reconciler.adapters import real_ports
from kimik3_reconciler.model.front import FrontConfig
from kimik3_reconciler.model.helper_env import EXPORTER_READS, FRONT_READS, helper_environment
from kimik3_reconciler.model.metrics import ExporterConfig
from kimik3_reconciler.model.specs import ExporterRun, FrontRun
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.exporter import run_exporter
from kimik3_reconciler.steps.front import run_front
from kimik3_reconciler.steps.report import NullReporter

TOKEN = "hf_" + "x" * 34
SET_BY_KIMIK3 = {"KIMIK3_STATE_DIR", "KIMIK3_LOG_FILE"}


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.decode().split("=", 1) for item in raw.split(b"\0") if item)


@pytest.fixture
def ports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Ports]:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", TOKEN)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-for-helpers")
    monkeypatch.setenv("HTTPS_PROXY", "http://user:secret@proxy.invalid:3128")
    monkeypatch.setenv("LANG", "C.UTF-8")
    ports = real_ports(tmp_path)
    started: list[int] = []
    ports.processes.spawn = _recording(ports.processes.spawn, started)  # type: ignore[union-attr,method-assign]
    yield ports
    for pid in started:
        ports.processes.terminate(pid, 10.0)  # type: ignore[union-attr]


def _recording(spawn, started: list[int]):  # noqa: ANN001, ANN202
    def wrapped(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        started.append(pid := spawn(*args, **kwargs))
        return pid

    return wrapped


def _assert_only_reads(pid: int, reads: tuple[str, ...]) -> None:
    environ = environ_of(pid)
    assert TOKEN not in "\0".join(environ.values())
    assert set(environ) - set(reads) == SET_BY_KIMIK3, sorted(environ)
    assert environ["LANG"] == "C.UTF-8"  # what it reads still arrives


def test_the_exporter_gets_only_what_it_reads(ports: Ports) -> None:
    port = free_port()
    config = ExporterConfig(
        profile="k3",
        labels={"profile": "k3"},
        bind="127.0.0.1",
        port=port,
        container="k3",
        server_url=f"http://127.0.0.1:{free_port()}",
    )
    run_exporter(
        ExporterRun(
            profile="k3", config=config.to_json(), fingerprint=config.fingerprint, health_url=config.health_url
        ),
        ports,
        NullReporter(),
    )
    pid = ports.state.read("metrics/k3/process.json")["pid"]  # type: ignore[index]
    _assert_only_reads(pid, EXPORTER_READS)


def test_the_front_gets_only_what_it_reads(ports: Ports) -> None:
    config = FrontConfig(profile="k3", bind="127.0.0.1", port=free_port(), server_url=f"http://127.0.0.1:{free_port()}")
    run_front(
        FrontRun(profile="k3", config=config.to_json(), fingerprint=config.fingerprint, health_url=config.health_url),
        ports,
        NullReporter(),
    )
    pid = ports.state.read("front/k3/process.json")["pid"]  # type: ignore[index]
    _assert_only_reads(pid, FRONT_READS)
    assert not {"DOCKER_HOST", "SSH_AUTH_SOCK", "LD_LIBRARY_PATH"} & set(FRONT_READS)  # it talks to no daemon


def test_the_names_read_pass_and_kimik3s_own_win() -> None:
    env = helper_environment(
        {"PATH": "/bin", "HF_TOKEN": TOKEN, "KIMIK3_STATE_DIR": "/elsewhere"},
        ("PATH", "DOCKER_HOST"),
        {"KIMIK3_STATE_DIR": "/var/lib/kimik3"},
    )
    assert env == {"PATH": "/bin", "KIMIK3_STATE_DIR": "/var/lib/kimik3"}
