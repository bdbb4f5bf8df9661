#!/bin/bash
# Interleaved: kimik3 bench and llama-benchy against the same demo server, same sizes.
set -u
here=$(cd "$(dirname "$0")" && pwd)
for i in 1 2 3; do
  (cd "$(dirname "$PROFILE")" && python3 -m kimik3_reconciler bench "$(basename "$PROFILE")" --grid 1,2 --prompts 3 \
      --prompt-tokens 256 --output-tokens 128 --json 2>/dev/null > "$here/k3-$i.json")
  HF_HUB_OFFLINE=1 "$LB/bin/llama-benchy" --base-url "http://127.0.0.1:$PORT/v1" --model "$NAME" \
      --tokenizer "$here/tokenizer.json" --book-url file:///local/book.txt --pp 256 --tg 128 --exact-tg --no-cache \
      --concurrency 1 2 --runs 3 --latency-mode none --skip-coherence --no-warmup --format json \
      --save-result "$here/lb-$i.json" > "$here/lb-$i.log" 2>&1
done
