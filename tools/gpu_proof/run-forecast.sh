#!/usr/bin/env bash
# Placement forecast vs llama-server's --fit on the device machine (issue 4): native CUDA build
# (kimik3's cmake args), a ~2.2 GB synthetic kimi-k3 GGUF (24 layers, 64 experts), three fit targets.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
P=.gpu_proof
SNAP=/models/models--kimik3-demo--Kimi-K3-tiny-GGUF/snapshots/d3e0c0ded3e0c0ded3e0c0ded3e0c0ded3e0c0de/UD-SYNTH
mkdir -p "$SNAP"
python3 - "$SNAP" <<'PY' &
import sys
from pathlib import Path
from kimik3_reconciler.demo.tiny_gguf import TinyDims, write_tiny_kimi_k3
write_tiny_kimi_k3(Path(sys.argv[1]), "K3-synth", shards=1, seed=3, layers=24,
                   dims=TinyDims(n_embd=256, n_expert=64, expert_ff=256, expert_latent=512))
PY
GEN=$!
python3 tools/gpu_proof/render.py tools/gpu_proof/h200-tiny.yaml $P/tiny > /tmp/rendered.json || exit 1
mkdir -p /tmp/src && tar -xzf $P/llama.cpp-b11434.tar.gz -C /tmp/src --strip-components=1
mapfile -t CMAKE_ARGS < <(python3 -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))["cmake_args"]))' /tmp/rendered.json)
t0=$(date +%s)
cmake -S /tmp/src -B /tmp/build -G Ninja "${CMAKE_ARGS[@]}" >/tmp/configure.log 2>&1 || { tail -30 /tmp/configure.log; exit 1; }
cmake --build /tmp/build -j"$(nproc)" --target llama-server >/tmp/build.log 2>&1 || { tail -40 /tmp/build.log; exit 1; }
echo "build_seconds=$(( $(date +%s) - t0 ))"
wait $GEN || exit 1
python3 tools/gpu_proof/forecast_cases.py "$SNAP/K3-synth.gguf" /tmp/build/bin | tee "$OUT/forecast-cases.jsonl"
cp /tmp/server-*.log "$OUT/" 2>/dev/null; ls "$OUT"
