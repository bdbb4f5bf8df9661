#!/usr/bin/env bash
# The README's second command: the whole test suite, as CI runs it.
#   import layers (lint-imports), format and lint (ruff), unit tests (planner cases, orchestrator on fakes, profile rules), and
#   integration tests against a real dockerd, the real CPU llama-server image built from
#   Dockerfile.llamacpp, and the real huggingface_hub client against a local hub fixture.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/pytest ] || { python3 -m venv .venv && .venv/bin/pip install -q -e ".[test,demo]"; }
bash scripts/ensure-docker.sh
bash scripts/ensure-base-image.sh
bash scripts/ensure-systemd-image.sh   # systemd as PID 1 in a container, for test_systemd_live.py
# systemd-analyze verifies every rendered unit (tests/unit/planning/test_rendered_units.py); a fresh machine lacks it.
command -v systemd-analyze >/dev/null 2>&1 || { apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null; }
# A real sshd (started by the test on a loopback port, its own keys) reaches the RPC worker's Docker over ssh://
# (tests/integration/test_rpc_docker.py); the ssh client runs `docker system dial-stdio` there.
{ [ -x /usr/sbin/sshd ] && command -v ssh >/dev/null 2>&1; } || { apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-server openssh-client >/dev/null; }
# A real Prometheus scrapes the metrics exporter (tests/integration/test_metrics_prometheus.py); the test starts
# its own on loopback with its own config (a service the package may start elsewhere is not used).
command -v prometheus >/dev/null 2>&1 || { apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
# pipx: tests/integration/test_install.py installs kimik3 the way the README's install does (its own pipx home).
command -v pipx >/dev/null 2>&1 || { apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends pipx >/dev/null; }
# A real container registry (Debian's docker-registry 2.8) for the pull by digest (tests/integration/
# test_image_pull_registry.py starts its own on a free loopback port via scripts/ensure-registry.sh).
command -v docker-registry >/dev/null 2>&1 || { apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-registry >/dev/null; }
# Nothing here restarts or stops the host's dockerd: the test that does (marked dockerd_restart) is deselected unless
# KIMIK3_DOCKERD_RESTART_TEST=1 is set by whoever runs it, alone (tests/integration/test_faults_dockerd_restart.py).
.venv/bin/lint-imports
# The formatter and linter (pyproject.toml [tool.ruff]); a venv made before ruff joined the test extra gets it here.
[ -x .venv/bin/ruff ] || .venv/bin/pip install -q "ruff>=0.6"
.venv/bin/ruff format --check --quiet .
.venv/bin/ruff check --quiet .
# Tests marked `engines` (vLLM's and SGLang's real parts) run in CI's second stage, scripts/test-engines.sh.
.venv/bin/python -m pytest -q -m "not engines" "$@"
