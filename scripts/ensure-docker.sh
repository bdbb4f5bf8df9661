#!/usr/bin/env bash
# Make sure a Docker daemon answers: install Debian's docker.io and start dockerd when needed.
# The dev/CI machines have no bridge networking: containers use the host network (as seed 000's do).
set -euo pipefail
if docker info >/dev/null 2>&1; then exit 0; fi
if ! command -v dockerd >/dev/null 2>&1; then
  echo "ensure-docker: installing docker.io" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io debootstrap >/dev/null
fi
echo "ensure-docker: starting dockerd (log: /var/log/dockerd.log)" >&2
# setsid: dockerd leaves the caller's process group, so a job control that kills the caller's group (a timed-out
# shell, a tool ending its job) does not take the machine's daemon with it (seen: dockerd gone without a log line).
setsid nohup dockerd --iptables=false --bridge=none >/var/log/dockerd.log 2>&1 < /dev/null &
for _ in $(seq 1 60); do
  docker info >/dev/null 2>&1 && exit 0
  sleep 1
done
echo "ensure-docker: dockerd did not answer within 60 s; see /var/log/dockerd.log" >&2
exit 1
