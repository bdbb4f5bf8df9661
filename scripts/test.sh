#!/usr/bin/env bash
# The README's second command: the whole test suite, as CI runs it.
#   import layers (lint-imports), unit tests (planner cases, engine on fakes, profile rules), and
#   integration tests against a real dockerd, the real CPU llama-server image built from
#   Dockerfile.llamacpp, and the real huggingface_hub client against a local hub fixture.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/pytest ] || { python3 -m venv .venv && .venv/bin/pip install -q -e ".[test,demo]"; }
bash scripts/ensure-docker.sh
bash scripts/ensure-base-image.sh
.venv/bin/lint-imports
.venv/bin/python -m pytest -q "$@"
