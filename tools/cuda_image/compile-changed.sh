#!/usr/bin/env bash
# The fork pin's partial CUDA compile (issue 28; docs/operations.md "The CUDA image"), when a whole build does not
# fit: in the offline devel base, the fork's archive with kimik3's patches (in the image's order), cmake with the
# CMAKE_ARGS kimik3 renders for `source: fork, cuda_architectures: ["120"]`, then only the translation units the
# fork changes, the two kimik3 patches touch, and ggml-cuda.cu (the patched CUDA file) for that architecture.
#   mkdir CTX; cp FORK.tar.gz CTX/source.tar.gz; cp kimik3_reconciler/patches/parallel-pinned-host-buffer.patch \
#     CTX/00-kimik3-parallel-pinned-host-buffer.patch; cp kimik3_reconciler/patches/parallel-host-read.patch \
#     CTX/01-kimik3-parallel-host-read.patch; (CMAKE_ARGS of the fork profile, one line) > CTX/fork-cmake-args.txt
#   docker run --rm --cpus 1 -v CTX:/ctx kimik3-test/cuda-devel:13.0-bookworm bash /ctx/compile-changed.sh
# (this file copied into CTX). The fork's archive: `git archive`-style from its commit (GitHub's archive URL).
set -eo pipefail
t0=$(date +%s)
mkdir -p /src && tar -xzf /ctx/source.tar.gz -C /src --strip-components=1
cd /src && for p in /ctx/*.patch; do echo "applying $(basename $p)"; patch -p1 --forward --batch < $p; done
cmake -S /src -B /build $(cat /ctx/fork-cmake-args.txt) > /ctx/configure.log 2>&1 || { tail -30 /ctx/configure.log; exit 1; }
grep -E "CUDA|ARCHITECTURES" /ctx/configure.log
echo "configure: $(( $(date +%s) - t0 )) s"
cd /build/src && make models/kimi-k3.cpp.o llama-model-loader.cpp.o 2>&1 | tail -3
cd /build/tools/mtmd && make clip.cpp.o models/kimik3.cpp.o mtmd.cpp.o 2>&1 | tail -3
echo "host TUs: $(( $(date +%s) - t0 )) s"
cd /build/ggml/src/ggml-cuda && make ggml-cuda.cu.o 2>&1 | tail -3
echo "ggml-cuda.cu (sm_120): $(( $(date +%s) - t0 )) s"
