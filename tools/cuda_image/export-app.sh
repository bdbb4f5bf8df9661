#!/usr/bin/env bash
# Pack what the H200 proof of the CUDA image needs (issue 28) into DEST (default .cuda_app/ at the repository
# root, in .git/info/exclude, never committed), within the device call's 64 MiB:
#   app.tar.xz      /app of the image tools/cuda_image/build.py built (its tag in build.json)
#   build.json      that build's summary: tag, image id, fingerprint, build args (CMAKE_ARGS), patches
#   patches/        kimik3's patches under the names the image's build context gave them (their order)
#   source.tar.gz   the build's source archive without its top-level docs/ and models/ (no build input reads
#                   them; the full one is 37 MB), for the native build of the same source on the device
#   pkg/, tools/    this checkout's kimik3_reconciler and tools/gpu_proof, so the proof runs from a branch
#   whl/            the Python wheels the device lacks, from KIMIK3_PROOF_WHEELS (default .whl, tools/gpu_proof/
#                   README.md) less the tune-only ones: then `carry: [".cuda_app"]` is all the call needs
#   MANIFEST        sha256 of each, and the full archive's
#   bash tools/cuda_image/export-app.sh BUILD_JSON [DEST]
set -euo pipefail
BUILD_JSON=$1
DEST=${2:-.cuda_app}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
TAG=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tag"])' "$BUILD_JSON")
ARCHIVE=${KIMIK3_ARCHIVE:-$REPO/.kimik3-demo/llama.cpp-b11434.tar.gz}
# The archive must be the one the image was built from (its sha256 is in the image's inputs label).
BUILT_FROM=$(docker image inspect -f '{{index .Config.Labels "kimik3.image.inputs"}}' "$TAG" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["build.archive.sha256"])')
[ "$(sha256sum "$ARCHIVE" | cut -d' ' -f1)" = "$BUILT_FROM" ] || { echo "$ARCHIVE is not the archive $TAG was built from ($BUILT_FROM)" >&2; exit 1; }
rm -rf "$DEST" && mkdir -p "$DEST/patches" "$DEST/pkg" "$DEST/tools"
WORK=$(mktemp -d /var/tmp/kimik3-cuda-app.XXXXXX)
trap 'rm -rf "$WORK"; [ -n "${CID:-}" ] && docker rm "$CID" >/dev/null' EXIT
CID=$(docker create "$TAG")
docker cp "$CID:/app" "$WORK/app"
t0=$(date +%s)
tar -C "$WORK" -c app | xz -T0 "-${XZ_LEVEL:-6}" > "$DEST/app.tar.xz"
echo "export-app: app.tar.xz $(du -m "$DEST/app.tar.xz" | cut -f1) MiB ($(du -sm "$WORK/app" | cut -f1) MiB unpacked) in $(( $(date +%s) - t0 )) s" >&2
cp "$BUILD_JSON" "$DEST/build.json"
# The image context's names: NN-kimik3-<file>; the files are kimik3's own (their sha256 is in the image's inputs).
python3 - "$BUILD_JSON" "$REPO/kimik3_reconciler/patches" "$DEST/patches" <<'PY'
import json, shutil, sys
from pathlib import Path
build, source, dest = json.load(open(sys.argv[1])), Path(sys.argv[2]), Path(sys.argv[3])
for name in build["patches"]:
    prefix, _, file = name.partition("-kimik3-")
    if not file:
        raise SystemExit(f"{name}: not one of kimik3's patches; copy the profile's build.patches by hand")
    shutil.copy(source / file, dest / name)
PY
mkdir -p "$WORK/src"
tar -xzf "$ARCHIVE" -C "$WORK/src"
top=$(ls "$WORK/src")
tar -C "$WORK/src" --exclude="$top/docs" --exclude="$top/models" -czf "$DEST/source.tar.gz" "$top"
cp -a "$REPO/kimik3_reconciler" "$DEST/pkg/"
cp -a "$REPO/tools/gpu_proof" "$DEST/tools/"
WHEELS=${KIMIK3_PROOF_WHEELS:-$REPO/.whl}
if [ -d "$WHEELS" ]; then
  mkdir -p "$DEST/whl"
  for w in "$WHEELS"/*.whl; do
    case $(basename "$w") in optuna-*|sqlalchemy-*|alembic-*|greenlet-*|mako-*|colorlog-*) ;; *) cp "$w" "$DEST/whl/";; esac
  done
fi
find "$DEST" -name __pycache__ -prune -exec rm -rf {} +
{ echo "full source archive $(sha256sum "$ARCHIVE" | cut -d' ' -f1) $(basename "$ARCHIVE")"
  (cd "$DEST" && sha256sum app.tar.xz source.tar.gz build.json $(ls patches/* 2>/dev/null)); } > "$DEST/MANIFEST"
du -sh "$DEST" >&2
