#!/usr/bin/env bash
# Partial pre-read on the device machine (issue 27 item 6), one device call: reload downtime as a ratio of the cold
# one for no, partial and full pre-read, with a balloon process holding RAM so that the model does not fit twice.
#   1. the model: a ~16.35 GB synthetic kimi-k3 GGUF (load_probe.py write-model: 24 layers, 4 shards; the disk is
#      64 GiB), written in the background while
#   2. llama.cpp b11434 builds natively with the cmake arguments kimik3 renders (load_probe.py cmake-args) and the
#      patches a CUDA image gets by default (model/builtin_patches.py: parallel-pin, parallel-host-read, in that
#      order) -> /tmp/build-preread/bin (~4.5 min; reused when there, a second call on a warm machine skips it);
#   3. the argv kimik3 renders for that model served hybrid (every layer's experts on the CPU, load_mode none), and
#   4. bench/load.py --partial-preread: a serving server; two whole pre-reads that fit (no balloon: the warm
#      reference of kimik3's prediction); then bench/balloon.py holds RAM (mlock'd anonymous memory, else every
#      page touched: the JSON says which, and the swap size) so that MemAvailable less the reserve keeps about half
#      the model, and the whole model does not fit (MemAvailable ~9.6 GiB against 15.2 GiB); then rounds of three
#      reloads in rotating order, each after the page cache is
#      emptied (drop_caches): none (cold), partial (the first bytes that planning/preread_step.partial_budget gives
#      for MemAvailable then, read by the pre-read step's adapter), full (the whole model read anyway). Rounds
#      continue while the call has time (PREREAD_RUNS, default 5; at least 3 wanted).
# The reserve: kimik3's is 10 % of RAM (12.8 GiB here, 84 % of this model: no balloon could make the model not fit
# and still leave a part to pre-read beside it); on seed 000's host it is 13 % of the model (102 of 802 GiB). The run
# keeps that proportion: PREREAD_RESERVE, default 2 GiB (kimik3's RESERVE_MIN, 13 % of 15.2 GiB), is what
# partial_budget and the balloon's size use; the JSON records both reserves.
# Writes $OUT/preread-h200.json (facts, summary, every draw), $OUT/run-preread.log (the table is at its end),
# $OUT/build.txt, $OUT/logs.tar.gz (server logs, configure log). CALL_LIMIT (seconds, default 560) bounds the call:
# no round starts that would not end 25 s before it.
#   CALL_LIMIT=560 bash tools/gpu_proof/run-preread.sh           (device call, carry: [".gpu_proof", ".whl"])
# Dry run on the CPU dev machine (no GPU, no compile, no drop_caches: the cache is emptied per file; no real RAM
# pressure: a forced MemAvailable and a small balloon, so other users of the machine are not squeezed):
#   PREREAD_BIN=<a CPU /app> PREREAD_MOUNT=<dir> LOAD_PROBE_SCALE=0.15 LOAD_PROBE_PORT=<free port>
#   PREREAD_AVAILABLE=<bytes> PREREAD_BALLOON=<bytes> PREREAD_RUNS=3 SITE=<dir> WHL=<empty dir> OUT=<dir>
#   PYTHONPATH=<worktree> bash tools/gpu_proof/run-preread.sh
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
export PYTHONPATH=${PREREAD_PYTHONPATH:-$SITE:$PWD}
REPO=$(cd "$HERE/../.." && pwd)
LIMIT=${CALL_LIMIT:-560}
export CALL_LIMIT_AT=$(( $(date +%s) + LIMIT - SECONDS - 25 ))
RESULTS=${PREREAD_OUT:-/tmp/preread-out}
MOUNT=${PREREAD_MOUNT:-/tmp/preread-models}  # stands for the container's /models (load_probe.argv_for)
MODEL_DIR=$MOUNT/models--kimik3-demo--Kimi-K3-tiny-GGUF/snapshots/d3e0c0ded3e0c0ded3e0c0ded3e0c0ded3e0c0de/UD-LOAD
BIN=${PREREAD_BIN:-/tmp/build-preread/bin}
rm -rf "$RESULTS" && mkdir -p "$RESULTS/logs"
log() { echo "[$(date +%H:%M:%S) +${SECONDS}s] $*" | tee -a "$RESULTS/run-preread.log"; }
copy_out() {
  cp "$RESULTS"/preread-h200.json "$RESULTS"/run-preread.log "$OUT/" 2>/dev/null
  cp /tmp/configure.log "$RESULTS/logs/" 2>/dev/null
  tar -czf "$OUT/logs.tar.gz" -C "$RESULTS" logs argv.json model.log 2>/dev/null
  ls -l "$OUT"
}
trap copy_out EXIT

# 1. the model, in the background
if ! compgen -G "$MODEL_DIR/*-00004-of-00004.gguf" >/dev/null; then
  rm -rf "$MODEL_DIR" && mkdir -p "$MODEL_DIR"
  ( python3 "$HERE/load_probe.py" write-model "$MODEL_DIR" >"$RESULTS/model.log" 2>&1 ) &
  GEN=$!
fi

# 2. the build
if [[ ! -x $BIN/llama-server ]]; then
  python3 "$HERE/load_probe.py" cmake-args > "$RESULTS/rendered.json" || exit 1
  PATCHES=$(python3 -c 'import sys
from kimik3_reconciler.model.builtin_patches import builtin_patches_for
print(" ".join(f"{sys.argv[1]}/kimik3_reconciler/patches/{p.file}" for p in builtin_patches_for("cuda", None)))' "$REPO") \
    || exit 1
  BUILD_DIR=$(dirname "$BIN")
  ( LLAMA_SRC=/tmp/src-preread LLAMA_BUILD=$BUILD_DIR LLAMA_PATCHES=$PATCHES \
    build_llama "$RESULTS/rendered.json" llama-server ) 2>&1 | tee "$OUT/build.txt"
  [[ ${PIPESTATUS[0]} == 0 && -x $BIN/llama-server ]] || { log "build failed"; exit 1; }
else
  echo "reusing $BIN/llama-server" | tee "$OUT/build.txt"
fi
log "build ready: $BIN"
if [[ -n ${GEN:-} ]]; then
  wait "$GEN" || { cat "$RESULTS/model.log"; log "model write failed"; exit 1; }
fi
cat "$RESULTS/model.log" 2>/dev/null | tee -a "$RESULTS/run-preread.log"
ls -l "$MODEL_DIR" | tee -a "$RESULTS/run-preread.log"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | tee -a "$RESULTS/run-preread.log"
grep -E "MemTotal|MemAvailable|SwapTotal" /proc/meminfo | tee -a "$RESULTS/run-preread.log"

# 3. kimik3's argv for the model, hybrid (every layer's experts on the CPU), load_mode none
LOAD_PROBE_MOUNT=$MOUNT PYTHONPATH=$HERE:$PYTHONPATH python3 - "$MODEL_DIR" > "$RESULTS/argv.json" <<'PY' \
  || { log "argv render failed"; exit 1; }
import json, sys
from pathlib import Path
import load_probe
observed = load_probe.observe(Path(sys.argv[1]))
layers = (observed.layout.n_layer if observed.layout else None) or load_probe.LAYERS
print(json.dumps(load_probe.argv_for(observed, layers, "none")))
PY
log "argv: $(tr -d '[],"' < "$RESULTS/argv.json")"

# 4. the reloads
log "measure: $(( CALL_LIMIT_AT - $(date +%s) )) s left"
python3 "$REPO/bench/load.py" --partial-preread --model "$MODEL_DIR" --native "$BIN" --argv-file "$RESULTS/argv.json" \
  --runs "${PREREAD_RUNS:-5}" --reference-draws "${PREREAD_REFERENCE:-2}" --timeout 150 --deadline "$CALL_LIMIT_AT" --json "$RESULTS/preread-h200.json" \
  --logs "$RESULTS/logs" --cache-share "${PREREAD_CACHE_SHARE:-0.5}" --reserve "${PREREAD_RESERVE:-2147483648}" \
  ${PREREAD_BALLOON:+--balloon "$PREREAD_BALLOON"} \
  ${PREREAD_AVAILABLE:+--available "$PREREAD_AVAILABLE"} 2>&1 | tee -a "$RESULTS/run-preread.log"
rc=${PIPESTATUS[0]}
log "done (rc $rc)"
exit "$rc"
