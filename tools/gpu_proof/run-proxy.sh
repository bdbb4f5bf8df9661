#!/usr/bin/env bash
# The latency proxy's cost on the lent H200 (issue 17): kimik3's rendered llama-server argv (h200-proxy.yaml:
# metrics.proxy on, so the server on 127.0.0.1:18761 and the proxy on 18760) serving the ~2.2 GB synthetic
# kimi-k3 GGUF run-tune.sh writes, all layers on the GPU; kimik3's proxy started as apply starts it; then
# proxy_native.py measures (bench/proxy_measure.py, the same core as bench/proxy.py): pinned (server, proxy
# and client on separate cores) and unpinned (the default). Results in $OUT/proxy-h200.json.
# Reuses /tmp/build/bin/llama-server and the synthetic model when an earlier call (run-tune.sh) left them;
# builds / writes them only when missing (the build alone is ~5 min).
#   bash tools/gpu_proof/run-proxy.sh                 # on the device, with carry [".gpu_proof", ".whl"]
#   PROXY_CPU=1 BIN=/path/to/cpu/bin MODELS_ROOT=/tmp/m bash tools/gpu_proof/run-proxy.sh   # a CPU dry run
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
export PYTHONPATH=$SITE:$PWD
BIN=${BIN:-/tmp/build/bin}
MODELS_ROOT=${MODELS_ROOT:-/models}; export MODELS_ROOT
SNAP=$MODELS_ROOT/models--kimik3-demo--Kimi-K3-tiny-GGUF/snapshots/d3e0c0ded3e0c0ded3e0c0ded3e0c0ded3e0c0de/UD-SYNTH
MODEL=$SNAP/K3-synth.gguf
PROFILE=$HERE/h200-proxy.yaml
if [[ ${PROXY_CPU:-0} == 1 ]]; then  # dry run on a CPU host: the same profile as the CPU variant
  sed -e '/cuda_architectures/d' -e 's/variant: cuda/variant: cpu/' -e 's/^gpus: \[0\]/gpus: none/' "$PROFILE" > /tmp/k3px17-profile.yaml
  PROFILE=/tmp/k3px17-profile.yaml
fi
if [[ ! -s $MODEL ]]; then  # as run-tune.sh writes it
  mkdir -p "$SNAP"
  python3 - "$SNAP" <<'PY' &
import sys
from pathlib import Path
from kimik3_reconciler.engines.llamacpp.smoke_model import TinyDims, write_tiny_kimi_k3
write_tiny_kimi_k3(Path(sys.argv[1]), "K3-synth", shards=1, seed=3, layers=24,
                   dims=TinyDims(n_embd=256, n_expert=64, expert_ff=256, expert_latent=512))
PY
  GEN=$!
else
  GEN=
fi
python3 "$HERE/render.py" "$PROFILE" "$SNAP" > /tmp/k3px17-rendered.json || exit 1
if [[ ! -x $BIN/llama-server ]]; then
  echo "no $BIN/llama-server: building it (about 5 min)"
  build_llama /tmp/k3px17-rendered.json llama-server || exit 1
fi
if [[ -n $GEN ]]; then wait $GEN || exit 1; fi
# render.py lists the model files it finds: rendered again now that the model surely exists
python3 "$HERE/render.py" "$PROFILE" "$SNAP" > /tmp/k3px17-rendered.json || exit 1
ls -l "$MODEL"; cat "$MODEL" > /dev/null  # in the page cache: the server's load is not what is measured
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader 2>/dev/null
# Two files come back ($OUT/proxy-h200.json, $OUT/proxy.txt): the device returns 8 at most per call, shared with
# whatever ran before in the same call. A hard stop 20 s past the budget (SIGINT: the JSON is still written).
# The budget counts from the script's start (pip, render, model load included); 60 s at least after a build.
BUDGET=$(( ${PROXY_BUDGET:-140} - SECONDS )); (( BUDGET < 60 )) && BUDGET=60
timeout -s INT $(( BUDGET + 20 )) python3 "$HERE/proxy_native.py" /tmp/k3px17-rendered.json "$BIN" "$OUT" \
  --budget "$BUDGET" ${PROXY_ARGS:-} 2>&1 | tee "$OUT/proxy.txt"
exit "${PIPESTATUS[0]}"
