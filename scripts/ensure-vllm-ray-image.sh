#!/usr/bin/env bash
# The vLLM CPU test image with Ray (tests/fixtures/vllm-cpu-ray), once per machine: for the two-host replica test
# (tests/integration/test_vllm_cluster_docker.py). Ray's wheels come from the host's pip (its index or mirror):
# builds on this dockerd resolve no names. Its label key says it is current (its Dockerfile and the base's id).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TAG=${KIMIK3_VLLM_RAY_IMAGE:-kimik3-test/vllm-cpu-ray:0.32.0}
FIXTURE="$ROOT/tests/fixtures/vllm-cpu-ray"
bash "$ROOT/scripts/ensure-vllm-image.sh"
BASE_ID=$(docker image inspect -f '{{.Id}}' kimik3-test/vllm-cpu:0.32.0)
KEY=$(cat "$FIXTURE/Dockerfile" <(echo "$BASE_ID") | sha256sum | cut -c1-16)
if [ "$(docker image inspect -f '{{index .Config.Labels "kimik3.vllm-ray-image"}}' "$TAG" 2>/dev/null)" = "$KEY" ]; then
  exit 0
fi
PIP=${KIMIK3_VLLM_PIP:-python3 -m pip}
CONTEXT=$(mktemp -d /var/tmp/kimik3-vllm-ray-context.XXXXXX)
trap 'rm -rf "$CONTEXT"' EXIT
cp "$FIXTURE/Dockerfile" "$CONTEXT/"
# The image's Python is 3.11 on x86-64: Ray's wheel and its dependencies for that, whatever the host runs.
$PIP download -q --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  "ray==2.60.0" -d "$CONTEXT/wheels" >&2
echo "ensure-vllm-ray-image: building $TAG (key $KEY)" >&2
docker build -q --label "kimik3.vllm-ray-image=$KEY" -t "$TAG" "$CONTEXT" >&2
echo "ensure-vllm-ray-image: $TAG ready" >&2
