#!/usr/bin/env bash
# tune vs the exhaustive grid on the device machine (issue 16): native CUDA build (kimik3's cmake args,
# sm_90), a ~2.2 GB synthetic kimi-k3 GGUF (24 layers, 64 experts; every searched split keeps some experts
# on the CPU), then tune_vs_grid.py PHASE. Phases: `build` (build + model), `grid`, `tune`, or `all` (all three).
# The machine keeps /tmp between calls while warm: `build` once, then `grid` and `tune` in later calls.
# PROOF names the carried folder (default .gpu_proof, as in README.md) and WHL its wheels; PROOF/pkg, when
# present, is put first on PYTHONPATH (a branch's kimik3_reconciler, carried beside a checkout of main).
#   PROOF=.tune_gpu WHL=.tune_gpu/whl bash tools/gpu_proof/run-tune.sh all
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
export PYTHONPATH=$PWD/$P/pkg:/tmp/site:$PWD
SNAP=/models/models--kimik3-demo--Kimi-K3-tiny-GGUF/snapshots/d3e0c0ded3e0c0ded3e0c0ded3e0c0ded3e0c0de/UD-SYNTH
MODEL=$SNAP/K3-synth.gguf
phase=${1:-all}
if [[ $phase == build || $phase == grid || $phase == all ]] && [[ ! -x /tmp/build/bin/llama-server || ! -s $MODEL ]]; then
  mkdir -p "$SNAP"
  python3 - "$SNAP" <<'PY' &
import sys
from pathlib import Path
from kimik3_reconciler.steps.smoke_model import TinyDims, write_tiny_kimi_k3
write_tiny_kimi_k3(Path(sys.argv[1]), "K3-synth", shards=1, seed=3, layers=24,
                   dims=TinyDims(n_embd=256, n_expert=64, expert_ff=256, expert_latent=512))
PY
  GEN=$!
  python3 "$HERE/render.py" "$HERE/h200-tiny.yaml" $P/tiny > /tmp/rendered.json || exit 1
  build_llama /tmp/rendered.json llama-server || exit 1
  wait $GEN || exit 1
  ls -l "$MODEL"; cat "$MODEL" > /dev/null  # warm: every run below reads the weights from the page cache
fi
# Results accumulate in /tmp/tune-out (kept while the machine is warm) and are copied to $OUT at the end;
# CALL_LIMIT (seconds since the script began) stops a phase early so the copy still happens inside the call.
mkdir -p /tmp/tune-out
for p in grid tune; do
  if [[ $phase == "$p" || $phase == all ]]; then
    timeout $(( ${CALL_LIMIT:-3000} - SECONDS - 10 )) python3 "$HERE/tune_vs_grid.py" "$MODEL" /tmp/build/bin /tmp/tune-out "$p" 2>&1 \
      | tee -a "/tmp/tune-out/$p.log"
  fi
done
cp /tmp/tune-out/* "$OUT/"; ls -l "$OUT"
