#!/usr/bin/env bash
# Make sure a container registry answers on 127.0.0.1:PORT (Debian's docker-registry, distribution 2.8), for tests
# that pull an image by digest (issue 25): install the package when needed, start it with its own storage dir and
# config (no auth: loopback only, which dockerd treats as an insecure-allowed registry), wait until /v2/ answers.
# Idempotent: a registry already answering on PORT is left as it is.
#   scripts/ensure-registry.sh [PORT [DIR [ADDR]]]   (default 5125, /var/tmp/kimik3-registry, 127.0.0.1); prints ADDR:PORT
# (ADDR: the fleet rig serves its hosts from a bridge address it made, tests/support/fleet_hosts.py)
# DIR holds config.yml, the storage (DIR/storage), the log (DIR/registry.log) and the pid (DIR/registry.pid).
set -euo pipefail
port="${1:-5125}"
dir="${2:-/var/tmp/kimik3-registry}"
addr="${3:-127.0.0.1}"
answers() { curl -fsS -o /dev/null "http://${addr}:${port}/v2/" 2>/dev/null; }
if answers; then echo "${addr}:${port}"; exit 0; fi
if ! command -v docker-registry >/dev/null 2>&1; then
  echo "ensure-registry: installing docker-registry" >&2
  apt-get update -qq
  # The package's service is not started (no systemd here, and it would take :5000): we run our own below.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-registry >/dev/null
fi
mkdir -p "${dir}/storage"
cat >"${dir}/config.yml" <<CONFIG
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: ${dir}/storage
  delete:
    enabled: true
http:
  addr: ${addr}:${port}
CONFIG
echo "ensure-registry: starting docker-registry on ${addr}:${port} (log: ${dir}/registry.log)" >&2
nohup docker-registry serve "${dir}/config.yml" >"${dir}/registry.log" 2>&1 &
echo $! >"${dir}/registry.pid"
for _ in $(seq 1 30); do
  if answers; then echo "${addr}:${port}"; exit 0; fi
  sleep 0.5
done
echo "ensure-registry: docker-registry did not answer on ${addr}:${port} within 15 s; see ${dir}/registry.log" >&2
exit 1
