#!/usr/bin/env bash
# tune vs the exhaustive grid on the device machine (issue 16): a ~2.4 GB synthetic kimi-k3 GGUF (24 layers,
# 64 experts; every searched split keeps some experts on the CPU), then tune_vs_grid.py PHASE for each phase.
#   bash tools/gpu_proof/run-tune.sh [grid] [tune] [remeasure]     (no phase, or `all`: the three in order;
#   `prepare`: only the build when missing and the model)
# llama-server: $LLAMA_BIN/llama-server (default /tmp/build/bin, where run.sh or a build before this call
# left it); built here (native CUDA, kimik3's cmake args, sm_90) ONLY when it is missing. The model is written
# only when missing. The machine keeps /tmp between calls while warm, so phases may be split across calls.
# CALL_LIMIT (seconds since this script began; default 560) bounds every phase, each keeping time for the
# phases after it, so the copy to $OUT always happens inside the call.
# PROOF names the carried folder (default .gpu_proof) and WHL its wheels; PROOF/pkg, when present, is put first
# on PYTHONPATH (a branch's kimik3_reconciler, carried beside a checkout of main).
# Dry run on a CPU build: TUNE_CPU=1 TUNE_FAST=1 TUNE_SMALL=1 LLAMA_BIN=/path/to/cpu/bin (README.md).
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
export PYTHONPATH=$PWD/$P/pkg:$SITE:$PWD
BIN=${LLAMA_BIN:-/tmp/build/bin}
LIMIT=${CALL_LIMIT:-560}
SNAP=/models/models--kimik3-demo--Kimi-K3-tiny-GGUF/snapshots/d3e0c0ded3e0c0ded3e0c0ded3e0c0ded3e0c0de/UD-SYNTH
MODEL=$SNAP/K3-synth.gguf
phases=("$@"); [[ ${#phases[@]} -eq 0 || ${phases[0]} == all ]] && phases=(grid tune remeasure)
# TUNE_FRESH=1: a new pass on a machine still warm from an earlier one (otherwise the phases resume it)
[[ ${TUNE_FRESH:-0} == 1 ]] && rm -rf /tmp/tune-out /tmp/tune-state /tmp/tune-logs
mkdir -p /tmp/tune-out
if command -v nvidia-smi >/dev/null; then  # the GPU's clock, power and temperature through the whole call
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu \
    --format=csv -l 1 >> /tmp/tune-out/gpu-clocks.csv 2>/dev/null &
  SMI=$!
fi
if [[ ! -s $MODEL ]]; then
  mkdir -p "$SNAP"
  t0=$SECONDS
  python3 - "$SNAP" "${TUNE_SMALL:-0}" <<'PY' &
import sys
from pathlib import Path
from kimik3_reconciler.steps.smoke_model import TinyDims, write_tiny_kimi_k3
dims = TinyDims(n_embd=64, n_expert=8, expert_ff=64, expert_latent=128) if sys.argv[2] == "1" else \
    TinyDims(n_embd=256, n_expert=64, expert_ff=256, expert_latent=512)
write_tiny_kimi_k3(Path(sys.argv[1]), "K3-synth", shards=1, seed=3, layers=24, dims=dims)
PY
  GEN=$!
fi
if [[ ! -x $BIN/llama-server ]]; then
  echo "no $BIN/llama-server: building it (~5-7 min)"
  python3 "$HERE/render.py" "$HERE/h200-tiny.yaml" $P/tiny > /tmp/rendered.json || exit 1
  build_llama /tmp/rendered.json llama-server || exit 1
  BIN=/tmp/build/bin
else
  echo "reusing $BIN/llama-server"
fi
if [[ -n ${GEN:-} ]]; then
  wait $GEN || exit 1
  echo "model_write_seconds=$(( SECONDS - t0 ))"
fi
ls -l "$MODEL"; cat "$MODEL" > /dev/null  # warm: every run below reads the weights from the page cache
echo "ready at ${SECONDS} s of ${LIMIT} s"
# Seconds each phase keeps for the phases after it (their expected length on the H200, README.md).
declare -A KEEP=([grid]=0 [tune]=0 [remeasure]=0 [prepare]=0)
for i in "${!phases[@]}"; do
  for later in "${phases[@]:$((i + 1))}"; do
    case $later in tune) KEEP[${phases[$i]}]=$(( KEEP[${phases[$i]}] + 90 ));; remeasure) KEEP[${phases[$i]}]=$(( KEEP[${phases[$i]}] + 30 ));; esac
  done
done
for p in "${phases[@]}"; do
  [[ $p == prepare ]] && continue  # `run-tune.sh prepare`: the build (when missing) and the model only
  left=$(( LIMIT - SECONDS - 15 - KEEP[$p] ))
  if (( left < 20 )); then echo "$p: skipped, ${left} s left before CALL_LIMIT"; continue; fi
  echo "== $p (at ${SECONDS} s; at most ${left} s)"
  t0=$SECONDS
  timeout "$left" python3 "$HERE/tune_vs_grid.py" "$MODEL" "$BIN" /tmp/tune-out "$p" 2>&1 | tee -a "/tmp/tune-out/$p.log"
  echo "$p: rc ${PIPESTATUS[0]}, $(( SECONDS - t0 )) s" | tee -a "/tmp/tune-out/$p.log"
done
[[ -n ${SMI:-} ]] && kill "$SMI"
for d in /tmp/tune-logs/*/; do  # the first server log of each phase: system_info, the offload, the buffers
  [[ -f $d/server-00.log ]] && cp "$d/server-00.log" "/tmp/tune-out/server-$(basename "$d").log"
done
# $OUT returns at most 8 files: the logs travel packed in one (11 files on a full run otherwise, and the
# 2026-12-03 run lost tune.json to that limit)
tar -czf "$OUT/logs.tar.gz" -C /tmp/tune-out --exclude='*.json' --exclude='*.jsonl' . 2>/dev/null
cp /tmp/tune-out/*.json /tmp/tune-out/*.jsonl "$OUT/" 2>/dev/null; ls -l "$OUT"; echo "done at ${SECONDS} s"
