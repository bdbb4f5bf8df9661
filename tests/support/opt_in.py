"""A pytest hook (tests/conftest.py imports it): tests that only run when asked for, each behind its variable.

- `dockerd_restart` stops and starts the host's one Docker daemon, and so every other container on it: asked for
  with KIMIK3_DOCKERD_RESTART_TEST=1 (run them alone, on a host nobody else uses: see
  tests/integration/test_faults_dockerd_restart.py).
- `fleet_rollout` rolls a change across three namespace hosts behind smg under a client's load (~10 min on 2 cores,
  the `fleet` extra installed): asked for with KIMIK3_FLEET_ROLLOUT_TEST=1, which CI's third stage sets
  (scripts/test-fleet.sh: it installs the extra and holds the rig's lock; the default suite has no smg).
- `fleet_groups` kills an RPC worker of a fleet's replica group and lets `kimik3 fleet recover` recreate it (~15 min
  on 2 cores, its own rig set-up): asked for with KIMIK3_FLEET_GROUPS_TEST=1; CI leaves it out to keep `.ci/run`
  within 45 min (stage 3 is the rollout's ~10-20 min).
- `fleet_slurm` runs the fleet's replicas as jobs of a local Slurm (slurm-wlm and munge installed, the rig's lock
  held): asked for with KIMIK3_FLEET_SLURM_TEST=1.
- `vllm_cluster` converges a vLLM replica over two hosts (vLLM's CPU image with Ray; ~4-5 min on 2 cores): asked for
  with KIMIK3_VLLM_CLUSTER_TEST=1; CI leaves it out for time. It is marked `engines` too (it needs the vLLM image),
  so deselecting it here, not skipping it, keeps CI's engines stage (where a skip fails) green."""

from __future__ import annotations

import os

import pytest

RESTART_ENV = "KIMIK3_DOCKERD_RESTART_TEST"
ASKED_FOR = {
    "dockerd_restart": RESTART_ENV,
    "fleet_rollout": "KIMIK3_FLEET_ROLLOUT_TEST",
    "fleet_groups": "KIMIK3_FLEET_GROUPS_TEST",
    "fleet_slurm": "KIMIK3_FLEET_SLURM_TEST",
    "vllm_cluster": "KIMIK3_VLLM_CLUSTER_TEST",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    left_out = {marker for marker, env in ASKED_FOR.items() if os.environ.get(env) != "1"}
    # Deselected, not skipped: the default suite (scripts/test.sh, CI) never collects a test nobody asked for.
    unasked = [item for item in items if any(item.get_closest_marker(marker) for marker in left_out)]
    if unasked:
        config.hook.pytest_deselected(items=unasked)
        items[:] = [item for item in items if item not in unasked]
