#!/usr/bin/env bash
# Issue 28: the fork pin (unslothai/llama.cpp PR #70 head edfd4c1) compiled and linked whole with the CUDA flags
# kimik3 renders for the RTX PRO 6000 (sm_120, as 120a), on the H200's 16 cores (no Docker there; the dev
# machine's 2 cores take ~2 h per CUDA build). What Dockerfile.llamacpp's build stage does: the source, kimik3's
# patches in the image's order, cmake with the rendered CMAKE_ARGS, the three targets the image ships; then what
# its runtime check does (every library of the three binaries resolves), the architectures in libggml-cuda.so
# and `llama-server --version` (no kernel runs: the H200 is sm_90).
#   dev machine: python3 tools/gpu_proof/fork_args.py tools/cuda_image/rtx-pro-6000-fork.yaml .fork28
#                (.fork28/source.tar.gz: a git archive of the fetched fork at edfd4c1; nothing fetched is committed)
#   device:      bash tools/gpu_proof/run-fork-build.sh      (carry [".fork28"]; ~5 min)
# Writes $OUT/fork-build.txt (the facts) and $OUT/fork-build.log.xz (the whole build log).
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
F=${FORK:-.fork28}
[[ -f $F/rendered.json && -f $F/source.tar.gz ]] || { echo "no $F/rendered.json or $F/source.tar.gz (fork_args.py)"; exit 1; }
F=$(cd "$F" && pwd)  # absolute: build_llama applies the patches from inside the source tree
mapfile -t PATCHES < <(ls "$F"/patches/*.patch)
REPORT=$OUT/fork-build.txt
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -2 | tr '\n' ' ')"
  echo "cmake: $(cmake --version | head -1); compiler: $(c++ --version | head -1)"
  echo "source: $F/source.tar.gz sha256 $(sha256sum "$F/source.tar.gz" | cut -c1-64)"
  echo "rendered: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["tag"], d["fingerprint"], d["patches"])' "$F/rendered.json")"
} | tee "$REPORT"
t0=$SECONDS
LLAMA_ARCHIVE=$F/source.tar.gz LLAMA_SRC=/tmp/fork-src LLAMA_BUILD=/tmp/fork-build LLAMA_PATCHES="${PATCHES[*]}" \
  build_llama "$F/rendered.json" llama-server llama-perplexity ggml-rpc-server 2>&1 | tee -a "$REPORT"
rc=${PIPESTATUS[0]}
echo "build: rc $rc, $(( SECONDS - t0 )) s" | tee -a "$REPORT"
grep -E "CUDA_ARCHITECTURES|CUDA Toolkit|Found CUDA" /tmp/configure.log | tee -a "$REPORT"
xz -c /tmp/build.log > "$OUT/fork-build.log.xz" 2>/dev/null
if [[ $rc == 0 ]]; then
  BIN=/tmp/fork-build/bin
  LIBS=$(cuda_pip_libs)
  for b in llama-server llama-perplexity ggml-rpc-server; do
    echo "== ldd $b: $(LD_LIBRARY_PATH=$BIN:$LIBS ldd "$BIN/$b" | grep -c '=>') libraries, unresolved: $(LD_LIBRARY_PATH=$BIN:$LIBS ldd "$BIN/$b" | grep -c 'not found')" | tee -a "$REPORT"
    LD_LIBRARY_PATH=$BIN:$LIBS ldd "$BIN/$b" | grep -E "not found|ggml|llama|mtmd|cuda|cublas" | tee -a "$REPORT"
  done
  echo "== architectures in libggml-cuda.so" | tee -a "$REPORT"
  CUOBJ=$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -1)
  if [[ -n $CUOBJ ]]; then "$CUOBJ" --list-elf "$(readlink -f "$BIN/libggml-cuda.so")" 2>&1 | sed 's/.*\.\(sm_[0-9a-z]*\)\..*/\1/' | sort | uniq -c | tee -a "$REPORT"
  else echo "no cuobjdump" | tee -a "$REPORT"; fi
  ls -l "$BIN"/libggml-cuda.so* | tee -a "$REPORT"
  echo "== llama-server --version" | tee -a "$REPORT"
  LD_LIBRARY_PATH=$BIN:$LIBS timeout 60 "$BIN/llama-server" --version 2>&1 | tail -5 | tee -a "$REPORT"
fi
ls -l "$OUT"
