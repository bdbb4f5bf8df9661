#!/usr/bin/env bash
# Load time on the device machine (issue 15 item 1, with items 2 and 3's figures): stock llama.cpp b11434 against
# the same build with kimik3's parallel-pin patch (kimik3_reconciler/patches/parallel-pinned-host-buffer.patch),
# on a ~16 GB synthetic kimi-k3 GGUF (24 layers, 4 shards). One phase per device call (each < 600 s):
#   build     stock build with the rendered cmake args -> /tmp/build-stock/bin, then the patch applied to /tmp/src
#             and an incremental rebuild (ggml-cuda.cu only) -> /tmp/build/bin (patched, a complete llama-server
#             build: run-tune.sh and the other proofs use it as it is); the model is written meanwhile
#   measure1  warm loads side by side (all-GPU / hybrid, stock / patched), tokens, decode and prompt tok/s
#   measure2  serve.load_mode none vs dio (cold and warm), pre-read reload vs cold reload
#   build3    kimik3's parallel-host-read patch (patches/parallel-host-read.patch) on top of the pin patch: the pin-only
#             binaries kept in /tmp/build-pin/bin, the read patch applied to /tmp/src, an incremental rebuild (the
#             llama-model-loader.cpp unit only) copied to /tmp/build-read/bin, then the patch reversed and rebuilt so
#             /tmp/build/bin is pin-only again for the other proofs (needs `build` first)
#   measure3  (runs build3 first when /tmp/build-read is missing) warm hybrid loads pin-only vs read patch with the
#             tokens, then pre-read vs cold reloads of both builds, alternating (load_probe.py measure3)
#   table     load-h200.json (every sample, ratios) and the printed table (measure1/2 also write it)
# The machine keeps /tmp between calls while warm: chain the calls. Results accumulate in /tmp/load-out and are
# copied to $OUT at the end of every call; CALL_LIMIT (seconds since the script began) ends a phase early so the
# copy still happens inside the call.
#   bash tools/gpu_proof/run-load.sh build; bash tools/gpu_proof/run-load.sh measure1; ... measure2
# LOAD_PROBE_DRY=1 with BIN_STOCK/BIN_PATCHED (and LOAD_PROBE_MOUNT, LOAD_PROBE_SCALE): the dry run of
# measure1/measure2 on a CPU dev machine with a CPU build, no GPU and no compile.
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
export PYTHONPATH=${LOAD_PROBE_PYTHONPATH:-$PWD/$P/pkg:/tmp/site:$PWD}  # a dry run names its own
REPO=$PWD
PATCH=$REPO/kimik3_reconciler/patches/parallel-pinned-host-buffer.patch
MODELS=${LOAD_PROBE_MOUNT:-/models}
MODEL_DIR=$MODELS/models--kimik3-demo--Kimi-K3-tiny-GGUF/snapshots/d3e0c0ded3e0c0ded3e0c0ded3e0c0ded3e0c0de/UD-LOAD
STOCK=${BIN_STOCK:-/tmp/build-stock/bin}
PATCHED=${BIN_PATCHED:-/tmp/build/bin}
RESULTS=${LOAD_OUT:-/tmp/load-out}
LIMIT=${CALL_LIMIT:-560}
export CALL_LIMIT_AT=$(( $(date +%s) + LIMIT - SECONDS - 15 ))
READ_PATCH=$REPO/kimik3_reconciler/patches/parallel-host-read.patch
PINONLY=${BIN_PINONLY:-/tmp/build-pin/bin}
READBIN=${BIN_READ:-/tmp/build-read/bin}
SRC=${LOAD_SRC:-/tmp/src} BUILD=${LOAD_BUILD:-/tmp/build}  # build3's tree (named otherwise only by its dry run)
phase=${1:?build, measure1, measure2, build3, measure3 or table}
mkdir -p "$RESULTS"
copy_out() { cp "$RESULTS"/*.json* "$RESULTS"/*.log "$OUT/" 2>/dev/null; ls -l "$OUT"; }
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*" | tee -a "$RESULTS/run-load.log"; }

if [[ $phase == build ]]; then
  if [[ -f /tmp/build/.kimik3-parallel-pin && -x $STOCK/llama-server && -s $MODEL_DIR/K3-load-00004-of-00004.gguf ]]; then
    log "build: already done (stock $STOCK, patched $PATCHED, model $MODEL_DIR)"; copy_out; exit 0
  fi
  if [[ -e /tmp/build/bin/llama-server && ! -f /tmp/build/.kimik3-parallel-pin && ! -x $STOCK/llama-server ]]; then
    # another proof built stock llama.cpp here first: keep it as the stock build, patch that tree
    log "build: /tmp/build exists unpatched: taken as the stock build"
  fi
  if [[ ! -s $MODEL_DIR/K3-load-00004-of-00004.gguf ]]; then
    mkdir -p "$MODEL_DIR"
    ( python3 "$HERE/load_probe.py" write-model "$MODEL_DIR" >"$RESULTS/model.log" 2>&1 ) &
    GEN=$!
  fi
  if [[ ! -x /tmp/build/bin/llama-server ]]; then
    if [[ -d $P/tiny ]] && ls $P/tiny/*.gguf >/dev/null 2>&1; then
      python3 "$HERE/render.py" "$HERE/h200-tiny.yaml" $P/tiny > /tmp/rendered.json || exit 1
    else  # the same cmake arguments, rendered without the tiny model (render.py needs one for the argv)
      python3 "$HERE/load_probe.py" cmake-args > /tmp/rendered.json || exit 1
    fi
    build_llama /tmp/rendered.json llama-server 2>&1 | tee -a "$RESULTS/run-load.log"
    [[ -x /tmp/build/bin/llama-server ]] || { log "stock build failed"; copy_out; exit 1; }
  fi
  if [[ ! -x $STOCK/llama-server ]]; then
    mkdir -p "$STOCK" && cp -a /tmp/build/bin/. "$STOCK/"
    log "stock binaries and libraries copied to $STOCK"
  fi
  readelf -d "$STOCK/llama-server" 2>/dev/null | grep -E "RPATH|RUNPATH" | tee -a "$RESULTS/run-load.log"
  if [[ ! -f /tmp/build/.kimik3-parallel-pin ]]; then
    if ! grep -q kimik3_parallel_pin_malloc /tmp/src/ggml/src/ggml-cuda/ggml-cuda.cu; then  # (an earlier call may have)
      # as Dockerfile.llamacpp applies a build patch
      ( cd /tmp/src && patch -p1 --forward --batch < "$PATCH" ) 2>&1 | tee -a "$RESULTS/run-load.log"
      [[ ${PIPESTATUS[0]} == 0 ]] || { log "PATCH FAILED"; copy_out; exit 1; }
    fi
    t0=$SECONDS
    cmake --build /tmp/build -j"$(nproc)" --target llama-server >/tmp/build-patched.log 2>&1 \
      || { tail -60 /tmp/build-patched.log | tee -a "$RESULTS/run-load.log"; cp /tmp/build-patched.log "$RESULTS/"; copy_out; exit 1; }
    log "patched rebuild: $(( SECONDS - t0 )) s, $(grep -c '^\[' /tmp/build-patched.log) steps: $(grep -o 'Building CUDA object [^ ]*' /tmp/build-patched.log | tr '\n' ' ')"
    grep -q kimik3_parallel_pin_malloc /tmp/build/bin/libggml-cuda.so* 2>/dev/null \
      || grep -rlq kimik3_parallel_pin_malloc /tmp/build/bin || { log "patched build lacks the patch"; copy_out; exit 1; }
    touch /tmp/build/.kimik3-parallel-pin
  fi
  if [[ -n ${GEN:-} ]]; then
    wait $GEN || { cat "$RESULTS/model.log"; log "model write failed"; copy_out; exit 1; }
  fi
  cat "$RESULTS/model.log" 2>/dev/null; ls -l "$MODEL_DIR"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | tee -a "$RESULTS/run-load.log"
  grep -E "MemTotal|MemAvailable" /proc/meminfo | tee -a "$RESULTS/run-load.log"
  log "build: done"; copy_out; exit 0
fi

if [[ $phase == measure1 || $phase == measure2 ]]; then
  [[ -x $STOCK/llama-server && -x $PATCHED/llama-server && -d $MODEL_DIR ]] || { log "run the build phase first"; exit 1; }
  python3 "$HERE/load_probe.py" "$phase" "$STOCK" "$PATCHED" "$MODEL_DIR" "$RESULTS" 2>&1 | tee -a "$RESULTS/run-load.log"
  rc=${PIPESTATUS[0]}
  # the server logs of the loads, packed in one file ($OUT keeps 8 files)
  tar -czf "$RESULTS/server-logs.tar.gz" -C "$RESULTS" logs 2>/dev/null && cp "$RESULTS/server-logs.tar.gz" "$OUT/"
  python3 "$HERE/load_probe.py" table "$STOCK" "$PATCHED" "$MODEL_DIR" "$RESULTS" 2>&1 | tee -a "$RESULTS/run-load.log"
  copy_out; exit "$rc"
fi

rebuild_loader() {  # rebuild_loader WHAT: the incremental rebuild after $SRC/src/llama-model-loader.cpp changed
  local t0=$SECONDS BLOG=$BUILD-read.log
  cmake --build "$BUILD" -j"$(nproc)" --target llama-server >"$BLOG" 2>&1 \
    || { tail -60 "$BLOG" | tee -a "$RESULTS/run-load.log"; cp "$BLOG" "$RESULTS/"; return 1; }
  log "$1 rebuild: $(( SECONDS - t0 )) s, $(grep -c '^\[' "$BLOG") steps: $(grep -o 'Building CXX object [^ ]*' "$BLOG" | tr '\n' ' ')"
}

if [[ $phase == build3 || ( $phase == measure3 && ! -f $READBIN/.kimik3-parallel-read && -z ${BIN_READ:-} ) ]]; then
  if [[ ! -f $READBIN/.kimik3-parallel-read ]]; then
    [[ -f $BUILD/.kimik3-parallel-pin && -x $BUILD/bin/llama-server && -f $SRC/src/llama-model-loader.cpp ]] \
      || { log "run the build phase first"; copy_out; exit 1; }
    if ! grep -q kimik3_parallel_reader "$SRC/src/llama-model-loader.cpp"; then  # /tmp/build is pin-only now
      rm -rf "$PINONLY" && mkdir -p "$PINONLY" && cp -a "$BUILD/bin/." "$PINONLY/"
      log "pin-only binaries and libraries copied to $PINONLY"
      # as Dockerfile.llamacpp applies a build patch
      ( cd "$SRC" && patch -p1 --forward --batch < "$READ_PATCH" ) 2>&1 | tee -a "$RESULTS/run-load.log"
      [[ ${PIPESTATUS[0]} == 0 ]] || { log "READ PATCH FAILED"; copy_out; exit 1; }
    fi
    rebuild_loader "read-patch" || { log "read-patch rebuild failed"; copy_out; exit 1; }
    grep -rlq "kimik3 parallel read" "$BUILD/bin" || { log "the read build lacks the patch"; copy_out; exit 1; }
    rm -rf "$READBIN" && mkdir -p "$READBIN" && cp -a "$BUILD/bin/." "$READBIN/"
    touch "$READBIN/.kimik3-parallel-read"
    log "read-patch binaries and libraries copied to $READBIN"
    # the servers run with LD_LIBRARY_PATH=their folder (load_probe.py): the read build must resolve its own libllama
    log "read build, libllama: $(LD_LIBRARY_PATH=$READBIN ldd "$READBIN/llama-server" 2>/dev/null | grep -o 'libllama[^ ]* => [^ ]*' || echo static)"
    # /tmp/build back to pin-only: run-tune.sh and measure1/2 take $BUILD/bin as the pin-patched build
    ( cd "$SRC" && patch -p1 -R --batch < "$READ_PATCH" ) 2>&1 | tee -a "$RESULTS/run-load.log"
    rebuild_loader "pin-only restore" || log "WARNING: $BUILD/bin still has the read patch"
    grep -rlq "kimik3 parallel read" "$BUILD/bin" && log "WARNING: $BUILD/bin still has the read patch"
  fi
  log "build3: done (pin-only $PINONLY, read $READBIN)"
  [[ $phase == build3 ]] && { copy_out; exit 0; }
fi

if [[ $phase == measure3 ]]; then
  [[ -x $READBIN/llama-server && -d $MODEL_DIR ]] || { log "run the build phase first"; copy_out; exit 1; }
  # the pin-only side: the snapshot build3 kept (a dry run names its own with BIN_PATCHED)
  [[ -n ${BIN_PATCHED:-} || ! -x $PINONLY/llama-server ]] || PATCHED=$PINONLY
  python3 "$HERE/load_probe.py" measure3 "$STOCK" "$PATCHED" "$MODEL_DIR" "$RESULTS" "$READBIN" 2>&1 \
    | tee -a "$RESULTS/run-load.log"
  rc=${PIPESTATUS[0]}
  tar -czf "$RESULTS/server-logs.tar.gz" -C "$RESULTS" logs 2>/dev/null && cp "$RESULTS/server-logs.tar.gz" "$OUT/"
  python3 "$HERE/load_probe.py" table "$STOCK" "$PATCHED" "$MODEL_DIR" "$RESULTS" 2>&1 | tee -a "$RESULTS/run-load.log"
  copy_out; exit "$rc"
fi

if [[ $phase == table ]]; then
  python3 "$HERE/load_probe.py" table "$STOCK" "$PATCHED" "$MODEL_DIR" "$RESULTS"; copy_out; exit 0
fi
echo "unknown phase $phase"; exit 2
