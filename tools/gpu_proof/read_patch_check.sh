#!/usr/bin/env bash
# The parallel-host-read patch's correctness on a CPU dev machine (issue 15): stock b11434 and the same with
# kimik3_reconciler/patches/parallel-host-read.patch, CPU builds with kimik3's CPU flags (a static llama-server),
# a ~1.15 GB synthetic kimi-k3 GGUF (load_probe.py write-model at LOAD_PROBE_SCALE=0.0625, 4 shards), then
# read_patch_check.py: (a) 64 greedy tokens identical over stock / read / read with KIMIK3_PARALLEL_READ=0 / 1 and
# 5 threads and with --check-tensors, (b) a shard cut short during the load, and a NaN with --check-tensors, fail
# the load cleanly in both builds, (c) warm load stock vs read.
# Not in the test suite: the build takes ~20 min on 2 cores (the patched one is an incremental rebuild of one file,
# ~10 s). Everything goes under WORK (default /tmp/read-patch-check); a second run reuses the builds and the model.
#   bash tools/gpu_proof/read_patch_check.sh            (from the repository root)
# ARCHIVE: the b11434 source archive (default .kimik3-demo/llama.cpp-b11434.tar.gz); PORT: the servers' port
# (default 18720); PYTHON: an interpreter with kimik3's dependencies (default .venv/bin/python, else python3);
# MEASURE3=1 also dry-runs run-load.sh measure3 against the two builds (the GPU host's phase, on the CPU).
set -uo pipefail
REPO=$PWD
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${WORK:-/tmp/read-patch-check}
ARCHIVE=${ARCHIVE:-$REPO/.kimik3-demo/llama.cpp-b11434.tar.gz}
PYTHON=${PYTHON:-$( [[ -x $REPO/.venv/bin/python ]] && echo "$REPO/.venv/bin/python" || echo python3 )}
PATCH=$REPO/kimik3_reconciler/patches/parallel-host-read.patch
MODELS=$WORK/models
MODEL_DIR=$MODELS/models--kimik3-demo--Kimi-K3-tiny-GGUF/snapshots/d3e0c0ded3e0c0ded3e0c0ded3e0c0ded3e0c0de/UD-LOAD
export LOAD_PROBE_DRY=1 LOAD_PROBE_MOUNT=$MODELS LOAD_PROBE_PORT=${PORT:-18720} PYTHONPATH=$REPO:$HERE
mkdir -p "$WORK"
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*"; }

if [[ ! -x $WORK/bin-stock/llama-server ]]; then
  [[ -f $ARCHIVE ]] || { echo "no source archive at $ARCHIVE (scripts/demo.sh fetches it; ARCHIVE=… names another)"; exit 1; }
  rm -rf "$WORK/src" "$WORK/build" && mkdir -p "$WORK/src" && tar -xzf "$ARCHIVE" -C "$WORK/src" --strip-components=1
  # kimik3's CPU cmake arguments (engines/llamacpp/build_flags.py), static so that a copied binary is self-contained
  cmake -S "$WORK/src" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_CUDA=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF >"$WORK/configure.log" 2>&1 \
    || { tail -30 "$WORK/configure.log"; exit 1; }
  log "stock build (minutes)"
  cmake --build "$WORK/build" -j"$(nproc)" --target llama-server >"$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log"; exit 1; }
  mkdir -p "$WORK/bin-stock" && cp -a "$WORK/build/bin/." "$WORK/bin-stock/"
fi
if [[ ! -x $WORK/bin-read/llama-server ]]; then
  if ! grep -q kimik3_parallel_reader "$WORK/src/src/llama-model-loader.cpp"; then
    ( cd "$WORK/src" && patch -p1 --forward --batch < "$PATCH" ) || { log "PATCH FAILED"; exit 1; }
  fi
  log "read-patch rebuild"
  cmake --build "$WORK/build" -j"$(nproc)" --target llama-server >"$WORK/build-read.log" 2>&1 || { tail -40 "$WORK/build-read.log"; exit 1; }
  log "rebuilt: $(grep -o 'Building CXX object [^ ]*' "$WORK/build-read.log" | tr '\n' ' ')"
  grep -q "kimik3 parallel read" "$WORK/build/bin/llama-server" || { log "the read build lacks the patch"; exit 1; }
  mkdir -p "$WORK/bin-read" && cp -a "$WORK/build/bin/." "$WORK/bin-read/"
fi
if [[ ! -s $MODEL_DIR/K3-load-00004-of-00004.gguf ]]; then
  mkdir -p "$MODEL_DIR" && LOAD_PROBE_SCALE=${LOAD_PROBE_SCALE:-0.0625} "$PYTHON" "$HERE/load_probe.py" write-model "$MODEL_DIR" || exit 1
fi
"$PYTHON" "$HERE/read_patch_check.py" "$WORK/bin-stock" "$WORK/bin-read" "$MODEL_DIR" "$WORK/out"
rc=$?
if [[ ${MEASURE3:-0} == 1 ]]; then
  # the GPU host's measure3 phase, dry: "patched" (pin-only there) is the stock CPU build here
  rm -rf "$WORK/out3"
  PATH=$(dirname "$PYTHON"):$PATH LOAD_PROBE_PYTHONPATH=$REPO BIN_STOCK=$WORK/bin-stock BIN_PATCHED=$WORK/bin-stock \
    BIN_READ=$WORK/bin-read LOAD_OUT=$WORK/out3 OUT=$WORK/out3-copy bash "$HERE/run-load.sh" measure3 || rc=1
fi
exit $rc
