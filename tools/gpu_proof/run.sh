#!/usr/bin/env bash
# GPU proof (run on the device machine from the repo root; see the closing note of issue 3):
# native CUDA build with kimik3's rendered cmake args, then the rendered container argv (minus
# docker) serving the tiny model on the GPU; records host facts (NVML, lscpu) as fixtures.
source tools/gpu_proof/lib.sh
python3 tools/gpu_proof/render.py tools/gpu_proof/h200-tiny.yaml $P/tiny > "$OUT/rendered.json" || exit 1
# the container's /models mount, recreated natively: the HF cache layout with the tiny shards
SNAP=/models/models--kimik3-demo--Kimi-K3-tiny-GGUF/snapshots/d3e0c0ded3e0c0ded3e0c0ded3e0c0ded3e0c0de/UD-Q2_K_XL
mkdir -p "$SNAP" && cp $P/tiny/*.gguf "$SNAP/"
mapfile -t ARGV < <(json_lines "$OUT/rendered.json" argv)
build_llama "$OUT/rendered.json" llama-server llama-perplexity 2>&1 | tee "$OUT/build.txt"
[ "${PIPESTATUS[0]}" = 0 ] || exit 1
cd /tmp/build/bin
LD_LIBRARY_PATH=/tmp/build/bin ./llama-server "${ARGV[@]}" -lv 4 >"$OUT/server.log" 2>&1 &
PID=$!
URL=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["health_url"])' "$OUT/rendered.json")
for i in $(seq 1 300); do
  code=$(curl -s -o /dev/null -w '%{http_code}' "$URL"); echo "$i $code" >> "$OUT/health.txt"
  [ "$code" = 200 ] && break
  kill -0 $PID 2>/dev/null || break
  sleep 0.2
done
BASE=${URL%/health}
{
  echo "health: $(curl -s "$URL")"
  echo "models: $(curl -s "$BASE/v1/models")"
  echo "chat: $(curl -s "$BASE/v1/chat/completions" -H 'Content-Type: application/json' -d '{"model":"kimi-k3-h200-proof","messages":[{"role":"user","content":"Hello"}],"max_tokens":16}')"
  echo "metrics: $(curl -s "$BASE/metrics" | grep -E '^llamacpp:(tokens_predicted_total|prompt_tokens_total)')"
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv
} > "$OUT/probe.txt" 2>&1
kill -TERM $PID; wait $PID; echo "server exit=$?" >> "$OUT/probe.txt"
cd - >/dev/null
nvidia-smi -q -x > "$OUT/nvidia-smi.xml" 2>&1
python3 - > "$OUT/nvml.json" <<'PY'
import json, pynvml
pynvml.nvmlInit()
out = {"driver": pynvml.nvmlSystemGetDriverVersion(), "cuda_driver": pynvml.nvmlSystemGetCudaDriverVersion(), "gpus": []}
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    mem = pynvml.nvmlDeviceGetMemoryInfo(h)
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
    out["gpus"].append({"index": i, "uuid": pynvml.nvmlDeviceGetUUID(h), "name": pynvml.nvmlDeviceGetName(h),
        "compute_capability": list(pynvml.nvmlDeviceGetCudaComputeCapability(h)),
        "memory_total": mem.total, "memory_free": mem.free, "memory_used": mem.used,
        "processes": [{"pid": p.pid, "used_memory": p.usedGpuMemory} for p in procs]})
print(json.dumps(out, indent=1))
PY
{ echo "## lscpu"; lscpu; echo "## lscpu -p=CORE,SOCKET"; lscpu -p=CORE,SOCKET; echo "## cpuinfo flags"; grep -m1 '^flags' /proc/cpuinfo;
  echo "## numa_balancing"; cat /proc/sys/kernel/numa_balancing 2>&1; echo "## meminfo"; head -3 /proc/meminfo; echo "## nproc"; nproc; } > "$OUT/host.txt"
