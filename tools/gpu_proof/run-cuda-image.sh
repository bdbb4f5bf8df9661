#!/usr/bin/env bash
# The Docker-built CUDA image's /app served on the H200 (issue 28), no Docker there: the llama-server that
# Dockerfile.llamacpp built on the CPU dev machine (tools/cuda_image/export-app.sh packed it into .cuda_app/)
# against the native build of the same source, kimik3 patches and cmake arguments, both started with the argv
# kimik3 renders, on a synthetic kimi-k3 model (cuda_image_compare.py): greedy tokens at temperature 0 and
# decode/prompt tok/s, alternating, 3 rounds, all-GPU and hybrid.
#   bash tools/gpu_proof/run-cuda-image.sh            (device call, carry: [".cuda_app"]; ~8 min)
#   bash .cuda_app/tools/gpu_proof/run-cuda-image.sh  (the same from the carried copy, before the branch is merged)
#   ... run-cuda-image.sh native, then ... compare: two calls on one warm machine, when .cuda_app with app.tar.xz
#   and source.tar.gz together pass the 64 MiB a call carries (the first call's .cuda_app without app.tar.xz)
# The libraries the image's binaries need beside /app: cuBLAS and cudart from the device's pip packages
# (nvidia-cublas, nvidia-cuda-runtime; found through python3, put on LD_LIBRARY_PATH, recorded), libcuda from the
# driver. The native build goes to /tmp/build-image-native (kept while the machine is warm: a second call skips
# it). Writes $OUT/cuda-image-run.json (the run's facts and every load), $OUT/build.txt, $OUT/logs.tar.gz; then
# `python3 tools/cuda_image/fold.py OUT > tests/fixtures/h200/cuda-image-h200.json` on the dev machine.
# Dry run on the CPU dev machine (run 2026-12-03: 144 s, every step to cuda-image-run.json): a CPU /app as both
# builds (export-app.sh of the demo's CPU image into CUDA_APP, a copy of its /app in /tmp/build-image-native/bin),
# a small model placed in MODEL_DIR, WHL holding the nvidia-cuda-runtime wheel, LOAD_PROBE_DRY=1
# CUDA_IMAGE_ROUNDS=1 LOAD_PROBE_PORT=<free> OUT=<dir>.
HERE=$(cd "$(dirname "$0")" && pwd)
PHASE=${1:-all}  # all | native (the build and the model only) | compare (reuses them; builds when missing)
C=${CUDA_APP:-.cuda_app}
[ -f "$C/build.json" ] || { echo "no $C/build.json: run tools/cuda_image/export-app.sh on the dev machine"; exit 1; }
[ "$PHASE" = native ] || [ -f "$C/app.tar.xz" ] || { echo "no $C/app.tar.xz (export-app.sh)"; exit 1; }
C=$(cd "$C" && pwd)
[ -d "$C/whl" ] && export WHL=${WHL:-$C/whl}  # the wheels export-app.sh packed (else .whl, as the other proofs)
source "$HERE/lib.sh"
[ -d "$C/pkg" ] && export PYTHONPATH=$C/pkg:$PYTHONPATH  # the branch's kimik3_reconciler, when carried
LIMIT=${CALL_LIMIT:-560}
export CALL_LIMIT_AT=$(( $(date +%s) + LIMIT ))
NATIVE=/tmp/build-image-native
MOUNT=/tmp/cuda-image-models  # stands for the container's /models (load_probe.argv_for)
MODEL_DIR=$MOUNT/models--kimik3-demo--Kimi-K3-tiny-GGUF/snapshots/d3e0c0ded3e0c0ded3e0c0ded3e0c0ded3e0c0de/UD-LOAD
RUN=/tmp/cuda-image-out
rm -rf "$RUN" && mkdir -p "$RUN"

# the Docker-built /app, as the image holds it
APP=/tmp/cuda-app/app
if [ "$PHASE" != native ]; then
  rm -rf /tmp/cuda-app && mkdir -p /tmp/cuda-app && tar -xJf "$C/app.tar.xz" -C /tmp/cuda-app || exit 1
fi

# cuBLAS and cudart from pip: the folders that hold libcublas.so.13 and libcudart.so.13
python3 - > "$RUN/pip-libs.json" <<'PY'
import importlib.metadata as md, json, os
found = {}
for dist in ("nvidia-cublas", "nvidia-cuda-runtime"):
    try:
        d = md.distribution(dist)
    except md.PackageNotFoundError:
        found[dist] = None
        continue
    libs = sorted(str(d.locate_file(f)) for f in d.files or () if "/lib/" in str(f) and ".so" in str(f))
    found[dist] = {"version": d.version, "libs": libs, "dirs": sorted({os.path.dirname(p) for p in libs})}
print(json.dumps(found, indent=1))
PY
cat "$RUN/pip-libs.json"
CUDA_PIP_LIBS=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(":".join(x for v in d.values() if v for x in v["dirs"]))' "$RUN/pip-libs.json")
export CUDA_PIP_LIBS
[ -n "$CUDA_PIP_LIBS" ] || { echo "no pip nvidia-cublas / nvidia-cuda-runtime found by python3"; exit 1; }

# the native build: the image's own CMAKE_ARGS (build.json), the same archive and patches in the image's order
python3 -c 'import json,sys; print(json.dumps({"cmake_args": json.load(open(sys.argv[1]))["build_args"]["CMAKE_ARGS"].split()}))' \
  "$C/build.json" > "$RUN/rendered-image.json"
python3 "$HERE/load_probe.py" cmake-args > "$RUN/rendered-here.json"  # what kimik3 renders for this host
if [[ ! -x $NATIVE/bin/llama-server ]]; then
  ARCHIVE=$C/source.tar.gz; [ -f "$ARCHIVE" ] || ARCHIVE=$P/llama.cpp-b11434.tar.gz
  rm -rf /tmp/src-image-native
  ( LLAMA_ARCHIVE=$ARCHIVE LLAMA_SRC=/tmp/src-image-native LLAMA_BUILD=$NATIVE \
    LLAMA_PATCHES="$(ls "$C"/patches/*.patch | tr '\n' ' ')" build_llama "$RUN/rendered-image.json" llama-server ) \
    2>&1 | tee "$OUT/build.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || exit 1
else
  echo "reusing $NATIVE/bin/llama-server" | tee "$OUT/build.txt"
fi

if ! compgen -G "$MODEL_DIR/*.gguf" >/dev/null; then  # ~2.4 GB, the shape run-tune.sh uses
  mkdir -p "$MODEL_DIR"
  python3 - "$MODEL_DIR" <<'PY' || exit 1
import sys, time
from pathlib import Path
from kimik3_reconciler.engines.llamacpp.smoke_model import TinyDims, write_tiny_kimi_k3
t0 = time.monotonic()
write_tiny_kimi_k3(Path(sys.argv[1]), "K3-image", shards=1, seed=11, layers=24,
                   dims=TinyDims(n_embd=256, n_expert=64, expert_ff=256, expert_latent=512))
print(f"model written in {time.monotonic() - t0:.1f} s")
PY
fi
cat "$MODEL_DIR"/*.gguf > /dev/null  # warm: every load reads from the page cache
[ "$PHASE" = native ] && { echo "native phase done at ${SECONDS} s"; exit 0; }

{ for bin in "$APP" "$NATIVE/bin"; do
    echo "== $bin"; LD_LIBRARY_PATH=$bin:$CUDA_PIP_LIBS ldd "$bin/llama-server"
    readelf -d "$bin/libggml-cuda.so" | grep -E 'RPATH|RUNPATH|NEEDED'
  done; } > "$RUN/ldd.txt" 2>&1
cat "$RUN/ldd.txt"
LOAD_PROBE_MOUNT=$MOUNT LOAD_PROBE_N_PREDICT=${LOAD_PROBE_N_PREDICT:-128} \
  python3 "$HERE/cuda_image_compare.py" "$APP" "$NATIVE/bin" "$MODEL_DIR" "$RUN"

python3 - "$RUN" "$C" > "$OUT/cuda-image-run.json" <<'PY'
import hashlib, json, subprocess, sys
from pathlib import Path
run, carried = Path(sys.argv[1]), Path(sys.argv[2])
try:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
except FileNotFoundError:  # a dry run on a machine without a GPU
    smi = None
print(json.dumps({
    "gpu": smi,
    "image": json.loads((carried / "build.json").read_text()),
    "app_sha256": hashlib.sha256((carried / "app.tar.xz").read_bytes()).hexdigest(),
    "cmake_args_image": json.loads((run / "rendered-image.json").read_text())["cmake_args"],
    "cmake_args_rendered_here": json.loads((run / "rendered-here.json").read_text())["cmake_args"],
    "pip_libs": json.loads((run / "pip-libs.json").read_text()),
    "ldd": (run / "ldd.txt").read_text(),
    "samples": [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines() if line.strip()],
}, indent=1))
PY
tar -czf "$OUT/logs.tar.gz" -C "$RUN" logs /tmp/configure.log 2>/dev/null
ls -l "$OUT"; echo "done at ${SECONDS} s"
