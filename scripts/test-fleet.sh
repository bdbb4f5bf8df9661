#!/usr/bin/env bash
# CI's third stage (.ci/run runs it once scripts/test-engines.sh passed): the tests marked `fleet_rollout`, which
# the default suite leaves out (tests/support/opt_in.py): `kimik3 fleet apply` on the fleet rig
# (tests/integration/test_fleet_rollout_docker.py: three network-namespace hosts, each with its own sshd and dockerd,
# smg in front, Ansible over SSH, a closed-loop client through the router during the rollout, a kill -9 under load,
# a failing candidate) and the drain step against smg and the demo's llama-server
# (tests/integration/test_fleet_drain_docker.py). It installs what they need, idempotently, and says how long each
# part took:
#   - the `fleet` extra into .venv (smg, ansible-core);
#   - nsenter, sshd/ssh and Debian's docker-registry (scripts/test.sh installs them too; here for a run of this
#     stage alone).
# The rig's bridge and addresses are one per machine: the tests run under `flock /tmp/k3-fleet-rig.lock`, so two
# runs on one machine wait for each other instead of colliding. pytest prints its 15 slowest steps (where the
# stage's time goes). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/pytest ] || { python3 -m venv .venv && .venv/bin/pip install -q -e ".[test,demo]"; }

source scripts/timed.sh  # timed NAME COMMAND...: run it, then say how long it took (stderr)

fleet_extra() {
  { [ -x .venv/bin/smg ] && [ -x .venv/bin/ansible-playbook ]; } && return 0
  .venv/bin/pip install -q -e ".[test,demo,fleet]"
}

rig_tools() {
  { command -v nsenter && [ -x /usr/sbin/sshd ] && command -v ssh && command -v docker-registry; } >/dev/null 2>&1 \
    && return 0
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends util-linux openssh-server \
    openssh-client docker-registry >/dev/null
}

bash scripts/ensure-docker.sh
bash scripts/ensure-base-image.sh
timed "fleet extra (pip)" fleet_extra
timed "rig tools (apt)" rig_tools
export KIMIK3_FLEET_ROLLOUT_TEST=1 KIMIK3_DOCKERD_RESTART_TEST=0
timed "pytest -m fleet_rollout" flock /tmp/k3-fleet-rig.lock .venv/bin/python -m pytest -q -rs --durations=15 -m fleet_rollout "$@"
