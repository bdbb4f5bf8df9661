# Shared by the GPU proof scripts (sourced): the device machine's Python setup and the native
# llama.cpp build with the cmake arguments kimik3 rendered into a JSON file (render.py).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SITE=${SITE:-/tmp/site}  # where the carried wheels are installed (a dry run elsewhere names its own)
if compgen -G "${WHL:-.whl}/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" ${WHL:-.whl}/*.whl
fi
export PYTHONPATH=$SITE:$PWD
P=${PROOF:-.gpu_proof}

json_lines() {  # json_lines FILE KEY: one item of the JSON list FILE[KEY] per line
  python3 -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))[sys.argv[2]]))' "$1" "$2"
}

# build_llama RENDERED_JSON TARGET...: /tmp/build/bin, with the rendered cmake args. LLAMA_ARCHIVE (default
# $P/llama.cpp-b11434.tar.gz), LLAMA_SRC / LLAMA_BUILD (default /tmp/src, /tmp/build) and LLAMA_PATCHES (files
# applied in the order given, as Dockerfile.llamacpp applies its patches/) change what and where.
build_llama() {
  local rendered=$1; shift
  local src=${LLAMA_SRC:-/tmp/src} build=${LLAMA_BUILD:-/tmp/build} patch
  mkdir -p "$src" && tar -xzf "${LLAMA_ARCHIVE:-$P/llama.cpp-b11434.tar.gz}" -C "$src" --strip-components=1
  for patch in ${LLAMA_PATCHES:-}; do
    echo "applying $(basename "$patch")"
    ( cd "$src" && patch -p1 --forward --batch < "$patch" ) || { echo "PATCH FAILED: $patch"; return 1; }
  done
  mapfile -t CMAKE_ARGS < <(json_lines "$rendered" cmake_args)
  echo "cmake args: ${CMAKE_ARGS[*]}"
  local t0; t0=$(date +%s)
  cmake -S "$src" -B "$build" -G Ninja "${CMAKE_ARGS[@]}" >/tmp/configure.log 2>&1 || { tail -30 /tmp/configure.log; return 1; }
  grep -E "CUDA|ARCHITECTURES|AVX|AMX" /tmp/configure.log | head -20
  cmake --build "$build" -j"$(nproc)" --target "$@" >/tmp/build.log 2>&1 || { tail -40 /tmp/build.log; return 1; }
  echo "build_seconds=$(( $(date +%s) - t0 )) steps=$(grep -c '^\[' /tmp/build.log)"
}

# cuda_pip_libs: the folders of the device's pip cuBLAS and cudart (nvidia-cublas, nvidia-cuda-runtime), joined with
# ':' for LD_LIBRARY_PATH: what a binary built elsewhere (the Docker image's /app, a build of the fork) needs beside
# the driver's libcuda there
cuda_pip_libs() {
  python3 - <<'PY'
import importlib.metadata as md, os
dirs = set()
for dist in ("nvidia-cublas", "nvidia-cuda-runtime"):
    try:
        d = md.distribution(dist)
    except md.PackageNotFoundError:
        continue
    dirs |= {os.path.dirname(str(d.locate_file(f))) for f in d.files or () if "/lib/" in str(f) and ".so" in str(f)}
print(":".join(sorted(dirs)))
PY
}
