#!/usr/bin/env bash
# Speculative-draft proof on the device machine (issue 5): the same native build as run.sh, then the
# argv kimik3 renders for tools/gpu_proof/h200-draft.yaml (target + draft on the derived device).
source tools/gpu_proof/lib.sh
python3 tools/gpu_proof/render.py tools/gpu_proof/h200-draft.yaml $P/tiny $P/Kimi-K3-tiny-draft.gguf > "$OUT/rendered-draft.json" || exit 1
SNAP=/models/models--kimik3-demo--Kimi-K3-tiny-GGUF/snapshots/d3e0c0ded3e0c0ded3e0c0ded3e0c0ded3e0c0de/UD-Q2_K_XL
mkdir -p "$SNAP" /drafts && cp $P/tiny/*.gguf "$SNAP/" && cp $P/Kimi-K3-tiny-draft.gguf /drafts/
mapfile -t ARGV < <(json_lines "$OUT/rendered-draft.json" argv)
build_llama "$OUT/rendered-draft.json" llama-server > "$OUT/draft-probe.txt" || exit 1
echo "argv: ${ARGV[*]}" >> "$OUT/draft-probe.txt"
cd /tmp/build/bin
LD_LIBRARY_PATH=/tmp/build/bin ./llama-server "${ARGV[@]}" -lv 4 >"$OUT/draft-server.log" 2>&1 &
PID=$!
URL=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["health_url"])' "$OUT/rendered-draft.json")
for i in $(seq 1 300); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL")" = 200 ] && break
  kill -0 $PID 2>/dev/null || break
  sleep 0.2
done
BASE=${URL%/health}
{
  echo "health: $(curl -s "$URL")"
  for n in 1 2 3; do
    echo "completion $n: $(curl -s "$BASE/completion" -H 'Content-Type: application/json' -d '{"prompt":"the of and to in a is that for it the of and to","n_predict":64,"temperature":0}' | head -c 400)"
  done
  echo "metrics:"; curl -s "$BASE/metrics" | grep -E '^llamacpp:(spec_decode|tokens_predicted_total)'
  echo "slots: $(curl -s "$BASE/slots")"
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv
} >> "$OUT/draft-probe.txt" 2>&1
kill -TERM $PID; wait $PID; echo "server exit=$?" >> "$OUT/draft-probe.txt"
