"""Real adapters: the only modules that import docker, huggingface_hub, httpx, openai or run host commands."""

from __future__ import annotations

import os
from pathlib import Path

from kimik3_reconciler.model.env_knobs import knob_value
from kimik3_reconciler.model.specs import DockerHost
from kimik3_reconciler.ports import LockPort, Ports

__all__ = ["real_ports"]


def real_ports(
    state_dir: Path, docker_host: str | None = None, systemd_root: str = "/", systemctl_prefix: tuple[str, ...] = ()
) -> Ports:
    from kimik3_reconciler.adapters.bench_client import HttpLoad
    from kimik3_reconciler.adapters.cache_files import CacheFiles, cache_dir
    from kimik3_reconciler.adapters.docker_engine import DockerEngine, remote_engine
    from kimik3_reconciler.adapters.front_control import FrontControl
    from kimik3_reconciler.adapters.hf_hub import HuggingFaceHub
    from kimik3_reconciler.adapters.host_linux import LinuxHost
    from kimik3_reconciler.adapters.host_lock import StateDirLock, host_lock_path
    from kimik3_reconciler.adapters.http import HttpClient
    from kimik3_reconciler.adapters.openai_chat import OpenAIChat
    from kimik3_reconciler.adapters.processes import LocalProcesses
    from kimik3_reconciler.adapters.registry import RegistryApi
    from kimik3_reconciler.adapters.state_files import StateFiles, SystemClock
    from kimik3_reconciler.adapters.systemd import SystemdUnits

    engines: dict[tuple[str, str | None], DockerEngine] = {}

    def worker_docker(host: DockerHost) -> DockerEngine:
        """One client per worker Docker for the whole run (an ssh client process per connection)."""
        key = (host.url, host.tls_dir)
        if key not in engines:
            engines[key] = remote_engine(host.url, Path(host.tls_dir) if host.tls_dir else None)
        return engines[key]

    def worker_lock(host: DockerHost) -> LockPort:
        from kimik3_reconciler.adapters.worker_lock import DockerHostLock  # the SDK: only with workers

        return DockerHostLock(worker_docker(host), host.name)

    return Ports(
        docker=DockerEngine(docker_host),
        hub=HuggingFaceHub(_download_workers(), _peers()),
        http=HttpClient(),
        host=LinuxHost(docker_host),
        state=StateFiles(state_dir),
        clock=SystemClock(),
        chat=OpenAIChat(),
        units=SystemdUnits(systemd_root, systemctl_prefix),
        lock=StateDirLock(state_dir, host_lock_path()),
        load=HttpLoad(),
        processes=LocalProcesses(state_dir),
        worker_docker=worker_docker,
        worker_lock=worker_lock,
        cache=CacheFiles(cache_dir()),
        front=FrontControl(),
        registry=RegistryApi(),
    )


def _download_workers() -> int:
    """KIMIK3_DOWNLOAD_WORKERS (default 4): how many files the model step fetches at a time."""
    return knob_value("KIMIK3_DOWNLOAD_WORKERS", os.environ, 4)


def _peers() -> tuple[str, ...]:
    """KIMIK3_PEERS: the site hosts' mirrors (http://ADDRESS:PORT, comma-separated) the model step asks before the
    hub; `kimik3 fleet apply` sets it for each host's apply (cli/fleet_mirror.py). Unset: the hub alone."""
    return knob_value("KIMIK3_PEERS", os.environ, ())
