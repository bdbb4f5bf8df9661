# Sourced by CI's stage scripts: `timed NAME COMMAND...` runs the command, then says on stderr how long it took,
# prefixed with the script's name (test-engines: ..., test-fleet: ...).
timed() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "$(basename "$0" .sh): $name took $((SECONDS - start)) s" >&2
}
