#!/usr/bin/env bash
# Build the offline Python base image (Debian bookworm's python3 3.11, the ABI of the local torch wheel) once,
# from Debian's packages as ensure-base-image.sh does: no registry can be pulled from here
# (scripts/debootstrap-image.sh: a no-op once built, rebuilt when the package list changes).
set -euo pipefail
exec bash "$(dirname "$0")/debootstrap-image.sh" kimik3-test/python-runtime:bookworm \
  python3,python3-venv,ca-certificates,libgomp1,libnuma1,curl ensure-python-base-image \
  /var/tmp/kimik3-debootstrap-python.log --drop-debs
