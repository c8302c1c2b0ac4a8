#!/usr/bin/env bash
# The demo: provision the local test rig (three Debian 12 nodes with simulated GPUs, reached over real SSH) from
# inventory/rig.yaml with `pyinfra inventory.py deploys/gpu_node.py`, show that a second run changes nothing, then
# verify every GPU and check drift. `scripts/demo.sh down` stops the rig. Needs root (systemd-nspawn, bridge).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
export GPU_PROVISION_CLUSTER=${GPU_PROVISION_CLUSTER:-inventory/rig.yaml}
gp=.venv/bin/gpu-provision
rig=.venv/bin/gpu-provision-rig

if [ "${1:-}" = down ]; then
  exec "$rig" down
fi
needs_root scripts/demo.sh "it starts systemd-nspawn nodes on a private bridge"

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
converge_again

step "verify every GPU"
timed "$gp" verify inventory.py

step "drift: which nodes differ from the file"
timed "$gp" drift inventory.py

step "done; the rig keeps running (scripts/demo.sh down stops it)"
