#!/usr/bin/env bash
# debootstrap-image.sh TAG INCLUDE WHO LOG [--drop-debs]: a Debian bookworm image made once from Debian's packages
# (debootstrap --variant=minbase --include=INCLUDE), no registry needed: what ensure-base-image.sh and
# ensure-python-base-image.sh build. Keyed by the debootstrap arguments (an image label), so a second run is a
# no-op and a changed package list rebuilds it. WHO names the caller in messages; LOG takes debootstrap's output;
# --drop-debs leaves apt's downloaded packages out of the image.
set -euo pipefail
TAG=$1 INCLUDE=$2 WHO=$3 LOG=$4 DROP_DEBS=${5:-}
KEY="minbase:${INCLUDE}:bookworm"
if [ "$(docker image inspect -f '{{index .Config.Labels "kimik3.debootstrap"}}' "$TAG" 2>/dev/null)" = "$KEY" ]; then
  exit 0
fi
command -v debootstrap >/dev/null 2>&1 || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
ROOTFS=$(mktemp -d /var/tmp/kimik3-rootfs.XXXXXX)
trap 'rm -rf "$ROOTFS"' EXIT
echo "$WHO: debootstrap bookworm ($INCLUDE)" >&2
debootstrap --variant=minbase --include="$INCLUDE" bookworm "$ROOTFS" >"$LOG" 2>&1 || { tail -20 "$LOG" >&2; exit 1; }
if [ "$DROP_DEBS" = --drop-debs ]; then
  rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb
fi
tar -C "$ROOTFS" -c . | docker import -c "LABEL kimik3.debootstrap=$KEY" - "$TAG" >/dev/null
echo "$WHO: $TAG ready" >&2
