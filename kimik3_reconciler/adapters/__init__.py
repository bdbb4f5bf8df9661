"""Real adapters: the only modules that import docker, huggingface_hub, httpx, openai or run host commands."""

from __future__ import annotations

from pathlib import Path

from kimik3_reconciler.ports import Ports

__all__ = ["real_ports"]


def real_ports(state_dir: Path, docker_host: str | None = None, systemd_root: str = "/",
               systemctl_prefix: tuple[str, ...] = ()) -> Ports:
    from kimik3_reconciler.adapters.docker_engine import DockerEngine
    from kimik3_reconciler.adapters.hf_hub import HuggingFaceHub
    from kimik3_reconciler.adapters.host_linux import LinuxHost
    from kimik3_reconciler.adapters.http import HttpClient
    from kimik3_reconciler.adapters.openai_chat import OpenAIChat
    from kimik3_reconciler.adapters.state_files import StateFiles, SystemClock
    from kimik3_reconciler.adapters.systemd import SystemdUnits

    return Ports(docker=DockerEngine(docker_host), hub=HuggingFaceHub(), http=HttpClient(), host=LinuxHost(),
                 state=StateFiles(state_dir), clock=SystemClock(), chat=OpenAIChat(),
                 units=SystemdUnits(systemd_root, systemctl_prefix))
