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

build_llama() {  # build_llama RENDERED_JSON TARGET...: /tmp/build/bin, with the rendered cmake args
  local rendered=$1; shift
  mkdir -p /tmp/src && tar -xzf $P/llama.cpp-b11434.tar.gz -C /tmp/src --strip-components=1
  mapfile -t CMAKE_ARGS < <(json_lines "$rendered" cmake_args)
  echo "cmake args: ${CMAKE_ARGS[*]}"
  local t0; t0=$(date +%s)
  cmake -S /tmp/src -B /tmp/build -G Ninja "${CMAKE_ARGS[@]}" >/tmp/configure.log 2>&1 || { tail -30 /tmp/configure.log; return 1; }
  grep -E "CUDA|ARCHITECTURES|AVX|AMX" /tmp/configure.log | head -20
  cmake --build /tmp/build -j"$(nproc)" --target "$@" >/tmp/build.log 2>&1 || { tail -40 /tmp/build.log; return 1; }
  echo "build_seconds=$(( $(date +%s) - t0 )) steps=$(grep -c '^\[' /tmp/build.log)"
}
