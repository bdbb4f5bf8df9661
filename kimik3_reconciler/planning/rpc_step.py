"""The old name of planning/worker_step.py, left only for engine.py and planning/launch.py, which the engine seam
(branch seam25, issue 25) is moving in parallel: once both import worker_step, delete this module."""

from __future__ import annotations

from kimik3_reconciler.planning.worker_step import (
    docker_host, dropped_worker_hosts, recorded_worker_hosts, rpc_endpoints, worker_fingerprints, worker_hosts,
)

__all__ = ["docker_host", "dropped_worker_hosts", "recorded_worker_hosts", "rpc_endpoints", "worker_fingerprints",
           "worker_hosts"]
