#!/usr/bin/env bash
# Placement forecast vs llama-server's --fit on the device machine (issue 4): native CUDA build
# (kimik3's cmake args), a ~2.2 GB synthetic kimi-k3 GGUF (24 layers, 64 experts), three fit targets.
source tools/gpu_proof/lib.sh
SNAP=/models/models--kimik3-demo--Kimi-K3-tiny-GGUF/snapshots/d3e0c0ded3e0c0ded3e0c0ded3e0c0ded3e0c0de/UD-SYNTH
mkdir -p "$SNAP"
python3 - "$SNAP" <<'PY' &
import sys
from pathlib import Path
from kimik3_reconciler.engines.llamacpp.smoke_model import TinyDims, write_tiny_kimi_k3
write_tiny_kimi_k3(Path(sys.argv[1]), "K3-synth", shards=1, seed=3, layers=24,
                   dims=TinyDims(n_embd=256, n_expert=64, expert_ff=256, expert_latent=512))
PY
GEN=$!
python3 tools/gpu_proof/render.py tools/gpu_proof/h200-tiny.yaml $P/tiny > /tmp/rendered.json || exit 1
build_llama /tmp/rendered.json llama-server || exit 1
wait $GEN || exit 1
python3 tools/gpu_proof/forecast_cases.py "$SNAP/K3-synth.gguf" /tmp/build/bin | tee "$OUT/forecast-cases.jsonl"
cp /tmp/server-*.log "$OUT/" 2>/dev/null; ls "$OUT"
