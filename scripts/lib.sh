# Shell helpers of the demos (scripts/demo.sh, scripts/vagrant-demo.sh): sourced, never run.

step() { printf '\n=== %s\n' "$*"; }
timed() { local t0=$SECONDS; "$@"; local rc=$?; printf -- '--- %ss\n' $((SECONDS - t0)); return $rc; }

# needs_root SCRIPT WHY: stop (exit 2) unless running as root.
needs_root() {
  if [ "$(id -u)" != 0 ]; then
    echo "$1 needs root: $2" >&2
    exit 2
  fi
}

# converge_again: run the deploy once more and fail unless no operation changed anything. pyinfra's results table
# ends each operation's row with: Hosts Success Error "No Change". Every operation, the verification run included
# (a check, which never counts as a change), must report no success, i.e. no change.
converge_again() {
  local log changed
  log=$(mktemp)
  timed .venv/bin/pyinfra -y inventory.py deploys/gpu_node.py 2>&1 | tee "$log"
  changed=$(awk '/^--> Results:/ {on=1; next} on && /\|/ && $(NF-2) != "-" {print}' "$log")
  rm -f "$log"
  if [ -n "$changed" ]; then
    printf 'second run changed something: not idempotent\n%s\n' "$changed" >&2
    exit 1
  fi
  echo "second run: no operation changed anything"
}
