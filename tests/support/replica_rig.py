"""The router tests' set-up on real parts: three replicas of the demo's llama-server image (tests/support/
llama_replicas.py; the image built first where this daemon lacks it) and smg in front of them, started as
`kimik3 fleet apply` starts it with every replica added and in rotation. For the integration tests only: bench
scripts take Replicas alone (this module needs pytest and the demo)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kimik3_reconciler.adapters.router_smg import SmgRouter, start_smg, stop_smg
from support.llama_replicas import DEMO_IMAGE, Replicas, free_port, write_model
from support.realparts import converged_demo, require_docker_and_demo_hub


@contextmanager
def demo_replicas(tmp_path_factory: pytest.TempPathFactory, prefix: str, build_port: int) -> Iterator[Replicas]:
    """Three fresh replicas named `{prefix}-{i}` serving the tiny GGUF; the demo's image built first (container
    `{prefix}-build` on `build_port`, removed after) where missing. Fails without a Docker daemon."""
    require_docker_and_demo_hub()
    if subprocess.run(["docker", "image", "inspect", DEMO_IMAGE], capture_output=True).returncode:
        with contextmanager(converged_demo)(tmp_path_factory.mktemp("demo-image"), f"{prefix}-build", build_port):
            pass  # builds the demo's image (cached by layer) and removes its container
    model = write_model(tmp_path_factory.mktemp(f"{prefix}-model"))
    with Replicas(model, prefix=prefix) as started:
        yield started


@contextmanager
def smg_over(
    replicas: Replicas, policy: str, log: Path, port: int | None = None, metrics_port: int | None = None
) -> Iterator[SmgRouter]:
    """smg on loopback (`port`, `metrics_port`: free ones unless given) with `policy`, every replica added and in
    its rotation; its control closed and the process stopped after."""
    running = start_smg("127.0.0.1", port or free_port(), metrics_port or free_port(), policy, log)
    control = SmgRouter(running.url, running.metrics_url)
    try:
        for url in replicas.urls:
            control.add(url)
        for url in replicas.urls:
            control.wait_in_rotation(url, timeout_s=60)
        yield control
    finally:
        control.close()
        stop_smg(running)
