#!/usr/bin/env bash
# The demo: provision the local test rig (three Debian 12 nodes with simulated GPUs, reached over real SSH) from
# inventory/rig.yaml with `pyinfra inventory.py deploys/gpu_node.py`, show that a second run changes nothing, then
# verify every GPU and check drift. `scripts/demo.sh down` stops the rig. Needs root (systemd-nspawn, bridge).
set -euo pipefail
cd "$(dirname "$0")/.."
export GPU_PROVISION_CLUSTER=${GPU_PROVISION_CLUSTER:-inventory/rig.yaml}
gp=.venv/bin/gpu-provision
rig=.venv/bin/gpu-provision-rig

if [ "${1:-}" = down ]; then
  exec "$rig" down
fi
if [ "$(id -u)" != 0 ]; then
  echo "scripts/demo.sh needs root: it starts systemd-nspawn nodes on a private bridge" >&2
  exit 2
fi

step() { printf '\n=== %s\n' "$*"; }
timed() { local t0=$SECONDS; "$@"; local rc=$?; printf -- '--- %ss\n' $((SECONDS - t0)); return $rc; }

step "setup (virtual environment, test rig, host packages)"
timed bash scripts/setup-dev.sh

step "validate and plan $GPU_PROVISION_CLUSTER"
"$gp" validate "$GPU_PROVISION_CLUSTER"
"$gp" plan "$GPU_PROVISION_CLUSTER"

step "rig up: nodes, signed package mirror, apt proxy"
timed "$rig" up --cluster "$GPU_PROVISION_CLUSTER"
"$rig" inventory

step "converge: pyinfra inventory.py deploys/gpu_node.py"
timed .venv/bin/pyinfra -y inventory.py deploys/gpu_node.py

step "converge again: nothing may change"
log=$(mktemp)
timed .venv/bin/pyinfra -y inventory.py deploys/gpu_node.py 2>&1 | tee "$log"
# pyinfra's results table ends each operation's row with: Hosts Success Error "No Change". Every operation, the
# verification run included (a check, which never counts as a change), must report no success, i.e. no change.
changed=$(awk '/^--> Results:/ {on=1; next} on && /\|/ && $(NF-2) != "-" {print}' "$log")
if [ -n "$changed" ]; then
  printf 'second run changed something: not idempotent\n%s\n' "$changed" >&2
  exit 1
fi
echo "second run: no operation changed anything"
rm -f "$log"

step "verify every GPU"
timed "$gp" verify inventory.py

step "drift: which nodes differ from the file"
timed "$gp" drift inventory.py

step "done; the rig keeps running (scripts/demo.sh down stops it)"
