#!/usr/bin/env bash
# Build the offline Python base image (Debian bookworm's python3 3.11, the ABI of the local torch wheel) once,
# from Debian's packages as ensure-base-image.sh does: no registry can be pulled from here. Keyed by the
# debootstrap arguments (an image label): a second run is a no-op, a changed package list rebuilds it.
set -euo pipefail
TAG=kimik3-test/python-runtime:bookworm
INCLUDE=python3,python3-venv,ca-certificates,libgomp1,libnuma1,curl
KEY="minbase:${INCLUDE}:bookworm"
if [ "$(docker image inspect -f '{{index .Config.Labels "kimik3.debootstrap"}}' "$TAG" 2>/dev/null)" = "$KEY" ]; then
  exit 0
fi
command -v debootstrap >/dev/null 2>&1 || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
ROOTFS=$(mktemp -d /var/tmp/kimik3-pyroot.XXXXXX)
trap 'rm -rf "$ROOTFS"' EXIT
LOG=/var/tmp/kimik3-debootstrap-python.log
echo "ensure-python-base-image: debootstrap bookworm ($INCLUDE)" >&2
debootstrap --variant=minbase --include="$INCLUDE" bookworm "$ROOTFS" >"$LOG" 2>&1 || { tail -20 "$LOG" >&2; exit 1; }
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb
tar -C "$ROOTFS" -c . | docker import -c "LABEL kimik3.debootstrap=$KEY" - "$TAG" >/dev/null
echo "ensure-python-base-image: $TAG ready" >&2
