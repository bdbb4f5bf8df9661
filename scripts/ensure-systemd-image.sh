#!/usr/bin/env bash
# Build the systemd test image (Debian bookworm with systemd as PID 1, TESTING.md §6) once, from
# Debian's packages: no registry can be pulled from here. Keyed by the debootstrap arguments (an
# image label), so a second run is a no-op and a changed package list rebuilds it.
set -euo pipefail
TAG=kimik3-test/systemd:bookworm
INCLUDE=systemd,systemd-sysv,dbus
KEY="minbase:${INCLUDE}:bookworm"
if [ "$(docker image inspect -f '{{index .Config.Labels "kimik3.debootstrap"}}' "$TAG" 2>/dev/null)" = "$KEY" ]; then
  exit 0
fi
command -v debootstrap >/dev/null 2>&1 || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
ROOTFS=$(mktemp -d /var/tmp/kimik3-systemd-rootfs.XXXXXX)
trap 'rm -rf "$ROOTFS"' EXIT
echo "ensure-systemd-image: debootstrap bookworm ($INCLUDE)" >&2
debootstrap --variant=minbase --include="$INCLUDE" bookworm "$ROOTFS" >/var/log/kimik3-debootstrap-systemd.log 2>&1 \
  || { tail -20 /var/log/kimik3-debootstrap-systemd.log >&2; exit 1; }
tar -C "$ROOTFS" -c . | docker import -c 'CMD ["/sbin/init"]' -c "LABEL kimik3.debootstrap=$KEY" - "$TAG" >/dev/null
echo "ensure-systemd-image: $TAG ready" >&2
