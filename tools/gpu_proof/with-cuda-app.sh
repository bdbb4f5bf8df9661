#!/usr/bin/env bash
# Run another GPU proof script with the Docker-built CUDA image's llama-server (issue 28's /app, proven on the
# H200 to give the native build's tokens and speed: tests/fixtures/h200/cuda-image-h200.json) instead of building
# one natively there (~4.5 min of the device's 16 cores every fresh machine):
#   bash tools/gpu_proof/with-cuda-app.sh tools/gpu_proof/run-tune.sh prepare grid3     (carry: [".whl",
#        ".cuda_app/app.tar.xz"]; tools/cuda_image/export-app.sh made .cuda_app on the dev machine)
# /app is unpacked once per warm machine into /tmp/cuda-app/app (LLAMA_BIN); cuBLAS and cudart come from the
# device's pip packages (nvidia-cublas, nvidia-cuda-runtime) on LD_LIBRARY_PATH, libcuda from the driver.
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"  # cuda_pip_libs, the carried wheels
APP=/tmp/cuda-app/app
if [[ ! -x $APP/llama-server ]]; then
  [[ -f ${CUDA_APP:-.cuda_app}/app.tar.xz ]] || { echo "no ${CUDA_APP:-.cuda_app}/app.tar.xz (export-app.sh)"; exit 1; }
  mkdir -p /tmp/cuda-app && tar -xJf "${CUDA_APP:-.cuda_app}/app.tar.xz" -C /tmp/cuda-app || exit 1
fi
CUDA_PIP_LIBS=$(cuda_pip_libs)
[[ -n $CUDA_PIP_LIBS ]] || { echo "no pip nvidia-cublas / nvidia-cuda-runtime found by python3"; exit 1; }
export LD_LIBRARY_PATH=$APP:$CUDA_PIP_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LLAMA_BIN=$APP
echo "llama-server: $APP (the Docker-built /app); libraries: $(ldd "$APP/llama-server" | grep -E 'cublas|cudart|libcuda' | tr -s ' \t' ' ')"
exec bash "$@"
