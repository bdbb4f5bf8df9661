#!/usr/bin/env bash
# Build the offline CUDA base images once (issue 28): no registry serves nvidia/cuda here, so the CUDA 13.0
# toolkit comes from NVIDIA's PyPI wheels (pinned below), laid out as nvidia/cuda lays it out
# (/usr/local/cuda-13.0, /usr/local/cuda -> it, lib64 -> lib, targets/x86_64-linux/{include,lib}) on Debian
# bookworm made by debootstrap, as the CPU base is (scripts/ensure-base-image.sh):
#   kimik3-test/cuda-devel:13.0-bookworm    the CPU build base + nvcc, crt, nvvm, cccl, cudart, cuBLAS, and a
#                                           link-time libcuda stub in lib64/stubs (as nvidia/cuda devel has one)
#   kimik3-test/cuda-runtime:13.0-bookworm  debootstrap minbase + libgomp1 + cudart and cuBLAS shared libraries
# Neither holds a real libcuda: the NVIDIA container runtime injects the driver's at run time.
# Wheels are kept in KIMIK3_CUDA_WHEELS (default /var/cache/kimik3/cuda-wheels): a rebuild downloads nothing.
# Keyed by the wheels' sha256 and this script (an image label): a second run is a no-op.
set -euo pipefail
cd "$(dirname "$0")/.."
DEVEL=kimik3-test/cuda-devel:13.0-bookworm
RUNTIME=kimik3-test/cuda-runtime:13.0-bookworm
RUNTIME_ROOT=kimik3-test/debian-runtime:bookworm
WHEELS=${KIMIK3_CUDA_WHEELS:-/var/cache/kimik3/cuda-wheels}
# The 13.0 line, as nvidia/cuda:13.0.0-* and the H200's 580 driver; the versions this machine's own
# /usr/local/cuda-13.0 was laid out from (its dist-info/), plus cuBLAS (which it lacks): the 13.0 line's last.
PINS=(nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-cccl==13.0.85
      nvidia-cuda-runtime==13.0.96 nvidia-cublas==13.0.2.14)
CUDA_VERSION=13.0.2  # what ENV CUDA_VERSION says (nvidia/cuda sets it; kimik3's host gate reads it)

label() { docker image inspect -f "{{index .Config.Labels \"$2\"}}" "$1" 2>/dev/null || true; }

mkdir -p "$WHEELS"
for pin in "${PINS[@]}"; do
  name=${pin%%==*}; version=${pin#*==}
  ls "$WHEELS/${name//-/_}-${version}-"*.whl >/dev/null 2>&1 && continue
  echo "ensure-cuda-base-images: pip download $pin" >&2
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$WHEELS" "$pin"
done
KEY=$( { cat "$0"; for pin in "${PINS[@]}"; do name=${pin%%==*}; version=${pin#*==}
         sha256sum "$WHEELS/${name//-/_}-${version}-"*.whl | cut -d' ' -f1; done; } | sha256sum | cut -c1-16)
if [ "$(label "$DEVEL" kimik3.cuda-base)" = "$KEY" ] && [ "$(label "$RUNTIME" kimik3.cuda-base)" = "$KEY" ]; then
  exit 0
fi

bash scripts/ensure-base-image.sh   # the devel image is the CPU build base plus the toolkit

# The runtime root: what nvidia/cuda's runtime image has under CUDA (an OS, libgomp for ggml-cpu), no compiler.
ROOT_KEY="minbase:libgomp1:bookworm"
if [ "$(label "$RUNTIME_ROOT" kimik3.debootstrap)" != "$ROOT_KEY" ]; then
  command -v debootstrap >/dev/null 2>&1 || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
  ROOTFS=$(mktemp -d /var/tmp/kimik3-rootfs.XXXXXX)
  echo "ensure-cuda-base-images: debootstrap bookworm (minbase, libgomp1)" >&2
  debootstrap --variant=minbase --include=libgomp1 bookworm "$ROOTFS" >/var/log/kimik3-debootstrap-runtime.log 2>&1 \
    || { tail -20 /var/log/kimik3-debootstrap-runtime.log >&2; rm -rf "$ROOTFS"; exit 1; }
  tar -C "$ROOTFS" -c . | docker import -c "LABEL kimik3.debootstrap=$ROOT_KEY" - "$RUNTIME_ROOT" >/dev/null
  rm -rf "$ROOTFS"
fi

STAGE=$(mktemp -d /var/tmp/kimik3-cuda.XXXXXX)
trap 'rm -rf "$STAGE"' EXIT
# Every wheel holds nvidia/cu13/{bin,include,lib,nvvm}: merged, that is the toolkit's own tree.
python3 - "$STAGE" "$WHEELS" "${PINS[@]}" <<'PY'
import glob, os, stat, sys, zipfile
stage, wheels, pins = sys.argv[1], sys.argv[2], sys.argv[3:]
for pin in pins:
    name, version = pin.split("==")
    (path,) = glob.glob(os.path.join(wheels, f"{name.replace('-', '_')}-{version}-*.whl"))
    runtime_lib = name in ("nvidia-cuda-runtime", "nvidia-cublas")
    with zipfile.ZipFile(path) as wheel:
        for info in wheel.infolist():
            if not info.filename.startswith("nvidia/cu13/") or info.is_dir() or "/.metadata/" in info.filename:
                continue
            rel = info.filename[len("nvidia/cu13/"):]
            targets = [os.path.join(stage, "devel", "cuda-13.0", rel)]
            if runtime_lib and rel.startswith("lib/") and ".so" in rel:
                targets.append(os.path.join(stage, "runtime", "cuda-13.0", rel))
            data = wheel.read(info)
            mode = (info.external_attr >> 16) & 0o777 or 0o644
            for target in targets:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as out:
                    out.write(data)
                os.chmod(target, mode | stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
PY

# nvidia/cuda's layout: the linker names (libX.so) beside the sonames, targets/ pointing at the tree, the
# loader told where the libraries are (ld.so.conf.d: the image's LD_LIBRARY_PATH=/app must not hide them).
mkdir -p "$STAGE/devel" "$STAGE/runtime"
cat >"$STAGE/devel/layout.sh" <<'SH'
set -eu
cd /usr/local/cuda-13.0
ln -s lib lib64
mkdir -p targets/x86_64-linux
[ -d include ] && ln -s ../../include targets/x86_64-linux/include
ln -s ../../lib targets/x86_64-linux/lib
for so in lib/*.so.*; do ln -sf "$(basename "$so")" "${so%%.so.*}.so"; done
ln -s cuda-13.0 /usr/local/cuda
echo /usr/local/cuda/lib64 >/etc/ld.so.conf.d/000_cuda.conf
ldconfig
SH
cat >"$STAGE/devel/stub.sh" <<'SH'
# The link-time libcuda (nvidia/cuda devel: lib64/stubs/libcuda.so): every cu* function cuda.h declares, as an
# empty body, soname libcuda.so.1 so binaries ask the loader for the driver's library. Never on the loader path.
set -eu
mkdir -p /usr/local/cuda/lib64/stubs
printf '#include <cuda.h>\n' | gcc -E -P -I/usr/local/cuda/include -x c - \
  | grep -oE '\bcu[A-Z][A-Za-z0-9_]*[[:space:]]*\(' | tr -d ' (' | sort -u | sed 's/.*/void &(void) {}/' >/tmp/stub.c
gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o /usr/local/cuda/lib64/stubs/libcuda.so /tmp/stub.c
echo "stub libcuda.so: $(wc -l </tmp/stub.c) symbols"
rm /tmp/stub.c
SH
ENV_LINES="ENV CUDA_VERSION=$CUDA_VERSION PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
cp "$STAGE/devel/layout.sh" "$STAGE/runtime/"
cat >"$STAGE/devel/Dockerfile" <<EOF
FROM kimik3-test/debian-build:bookworm
COPY cuda-13.0/ /usr/local/cuda-13.0/
COPY layout.sh stub.sh /tmp/
RUN sh /tmp/layout.sh && sh /tmp/stub.sh && rm /tmp/layout.sh /tmp/stub.sh && /usr/local/cuda/bin/nvcc --version
$ENV_LINES
LABEL kimik3.cuda-base=$KEY
EOF
cat >"$STAGE/runtime/Dockerfile" <<EOF
FROM $RUNTIME_ROOT
COPY cuda-13.0/ /usr/local/cuda-13.0/
COPY layout.sh /tmp/
RUN sh /tmp/layout.sh && rm /tmp/layout.sh
$ENV_LINES
LABEL kimik3.cuda-base=$KEY
EOF
echo "ensure-cuda-base-images: building $DEVEL and $RUNTIME (key $KEY)" >&2
docker build -t "$DEVEL" "$STAGE/devel" >&2
docker build -t "$RUNTIME" "$STAGE/runtime" >&2
echo "ensure-cuda-base-images: $DEVEL and $RUNTIME ready" >&2
