#!/usr/bin/env bash
# Build the offline base image (Debian bookworm with the llama.cpp toolchain) once, from Debian's
# packages: no registry can be pulled from here (scripts/debootstrap-image.sh: a no-op once built, rebuilt when the
# package list changes).
set -euo pipefail
exec bash "$(dirname "$0")/debootstrap-image.sh" kimik3-test/debian-build:bookworm \
  build-essential,cmake,libgomp1,curl,ca-certificates ensure-base-image /var/log/kimik3-debootstrap.log
