#!/usr/bin/env bash
# tune vs the exhaustive grid on the device machine (issues 16, 26): a ~2.4 GB synthetic kimi-k3 GGUF (24 layers,
# 64 experts; every searched split keeps some experts on the CPU), then tune_vs_grid.py PHASE for each phase:
#   bash tools/gpu_proof/run-tune.sh PHASE...
#   prepare        the build (only when $LLAMA_BIN/llama-server is missing) and the model (only when missing)
#   grid1 | grid2 | grid3  the exhaustive grid of space 1 (n_cpu_moe x ubatch, aggregate@4) | space 2 (ubatch x
#                  parallel, ttft-p95@4 under a decode floor set from this grid) | space 3 (space 2 widened: ubatch
#                  256..4096 x parallel 1..4, the same goal); resumable row by row across calls
#   tune1 | tune2 | tune3  three independent tune runs of that space, each followed by its alternating re-measure
#                  (= tune1a remeasure1a tune1b remeasure1b tune1c remeasure1c; each may also be named alone)
#   (no phase, or `all`: prepare grid1 tune1 grid2 tune2, which is more than one call's time on the H200)
# The lead's calls on the H200 (each under 560 s, chained at once: the machine goes back 30 s after a call, and
# every phase after `prepare` needs the /tmp the earlier calls left):
#   1. prepare grid1   ~4.5 min build + ~20 s model + ~210 s grid  (a grid cut short resumes in call 2)
#   2. grid1 tune1     3 x (~70 s tune + ~55 s re-measure) = ~6.5 min
#   3. grid2 tune2     ~230 s grid + 3 x (~55 s + ~55 s) = ~9.5 min; tune2c is skipped when it would not fit:
#   4. tune2c remeasure2c   (only if call 3 said "tune2c: skipped") ~2 min
# Space 3 (issue 26's second space with its best inside), on a machine with a llama-server already there
# (LLAMA_BIN, e.g. the Docker-built /app of issue 28: with-cuda-app.sh):
#   1. prepare grid3   ~20 s model + ~330 s grid;   2. tune3a remeasure3a tune3b remeasure3b   3. tune3c remeasure3c
# llama-server: $LLAMA_BIN/llama-server (default /tmp/build/bin); built here (native CUDA, kimik3's cmake args,
# sm_90) ONLY when it is missing. The machine keeps /tmp between calls while warm.
# CALL_LIMIT (seconds since this script began; default 560) bounds every phase, each keeping the expected time
# of the phases after it (EXPECT, scaled by TUNE_EXPECT_SCALE); a tune or re-measure phase that cannot get its
# expected time is skipped rather than cut (a cut tune is no measurement), so the copy to $OUT always happens.
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
phases=()
for p in "${@:-all}"; do
  case $p in
    all) phases+=(prepare grid1 tune1a remeasure1a tune1b remeasure1b tune1c remeasure1c grid2 tune2a remeasure2a
                  tune2b remeasure2b tune2c remeasure2c);;
    tune1|tune2|tune3) for r in a b c; do phases+=("$p$r" "remeasure${p#tune}$r"); done;;
    *) phases+=("$p");;
  esac
done
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
from kimik3_reconciler.engines.llamacpp.smoke_model import TinyDims, write_tiny_kimi_k3
# a trained context of 32768 (TinyDims' default is 4096): space 3's one slot takes the whole ctx_size 8192, which
# kimik3 refuses above the GGUF's trained context (issue 27); the weights and the compute are the same
dims = TinyDims(n_embd=64, n_expert=8, expert_ff=64, expert_latent=128, context_length=32768) \
    if sys.argv[2] == "1" else TinyDims(n_embd=256, n_expert=64, expert_ff=256, expert_latent=512,
                                        context_length=32768)
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
# Expected seconds of each phase on the H200 (warm page cache), kept free by the phases before it.
expect() {
  local e
  case $1 in grid1) e=210;; grid2) e=230;; grid3) e=330;; tune1?) e=70;; tune2?) e=55;; tune3?) e=100;;
    remeasure3?) e=75;; remeasure*) e=55;; *) e=0;; esac
  python3 -c "print(int($e * float('${TUNE_EXPECT_SCALE:-1}')))"
}
for i in "${!phases[@]}"; do
  p=${phases[$i]}
  [[ $p == prepare ]] && continue  # the build (when missing) and the model only
  keep=0
  for later in "${phases[@]:$((i + 1))}"; do keep=$(( keep + $(expect "$later") )); done
  left=$(( LIMIT - SECONDS - 15 - keep ))
  need=$(expect "$p")
  if [[ $p == tune* || $p == remeasure* ]] && (( left < need * 6 / 5 )); then
    echo "$p: skipped, ${left} s left for ~${need} s (name it in the next call)"; continue
  fi
  if (( left < 20 )); then echo "$p: skipped, ${left} s left before CALL_LIMIT"; continue; fi
  if [[ $p == remeasure* && ! -s /tmp/tune-out/tune${p#remeasure}.json ]]; then
    echo "$p: skipped, no tune${p#remeasure}.json"; continue
  fi
  echo "== $p (at ${SECONDS} s; at most ${left} s)"
  t0=$SECONDS
  timeout "$left" python3 "$HERE/tune_vs_grid.py" "$MODEL" "$BIN" /tmp/tune-out "$p" 2>&1 | tee -a "/tmp/tune-out/$p.log"
  echo "$p: rc ${PIPESTATUS[0]}, $(( SECONDS - t0 )) s" | tee -a "/tmp/tune-out/$p.log"
done
[[ -n ${SMI:-} ]] && kill "$SMI"
for d in /tmp/tune-logs/*/; do  # the first server log of each phase: system_info, the offload, the buffers
  [[ -f $d/server-00.log ]] && cp "$d/server-00.log" "/tmp/tune-out/server-$(basename "$d").log"
done
# $OUT returns at most 8 files: the results (every .json/.jsonl so far, all calls) in one archive, the logs in
# another; unpack both into one folder before folding (tune_fixture.py)
tar -czf "$OUT/results.tar.gz" -C /tmp/tune-out $(cd /tmp/tune-out && ls *.json *.jsonl 2>/dev/null)
tar -czf "$OUT/logs.tar.gz" -C /tmp/tune-out --exclude='*.json' --exclude='*.jsonl' . 2>/dev/null
ls -l "$OUT"; tar -tzvf "$OUT/results.tar.gz"; echo "done at ${SECONDS} s"
