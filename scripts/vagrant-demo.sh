#!/usr/bin/env bash
# Real VMs with Vagrant on this machine: the project's Vagrantfile brought up by `vagrant up --provider=libvirt`
# (QEMU; the box built here from Debian's archive), its cluster file made from `vagrant ssh-config`, the VMs converged
# by `pyinfra inventory.py deploys/gpu_node.py`, and a second run that changes nothing. The VMs have no GPU: they get
# the container runtime (Docker from Debian's archive, through the rig's apt proxy: the VMs reach nothing else).
# `scripts/vagrant-demo.sh down` destroys the VMs and undoes the libvirt set-up, then stops the rig. Needs root.
# GP_NODES (default 1) VMs; the first `vagrant up` takes about a minute per VM under emulation, a converge three.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
rig=.venv/bin/gpu-provision-rig
export GP_NODES=${GP_NODES:-1} VAGRANT_CHECKPOINT_DISABLE=1

if [ "${1:-}" = down ]; then
  if [ -f .vagrant/rig.env ]; then
    . .vagrant/rig.env
    vagrant destroy -f
  fi
  "$rig" libvirt down
  exec "$rig" down
fi
needs_root scripts/vagrant-demo.sh "it starts libvirt and the rig's bridge"

step "setup (virtual environment, Vagrant, vagrant-libvirt, QEMU)"
timed bash scripts/setup-dev.sh

step "rig up: its apt proxy is the VMs' only way to packages"
timed "$rig" up --cluster inventory/rig.yaml

step "libvirt up: daemons, isolated network, loopback forwarders, the box"
mkdir -p .vagrant
"$rig" libvirt up --nodes "$GP_NODES" > .vagrant/rig.env
cat .vagrant/rig.env
. .vagrant/rig.env

step "vagrant up --provider=libvirt"
timed vagrant up --provider=libvirt

step "cluster file from vagrant ssh-config"
vagrant ssh-config > .vagrant/ssh-config
"$rig" libvirt cluster .vagrant/ssh-config -o .vagrant/cluster.yaml
export GPU_PROVISION_CLUSTER=.vagrant/cluster.yaml
.venv/bin/gpu-provision validate "$GPU_PROVISION_CLUSTER"

step "converge: pyinfra inventory.py deploys/gpu_node.py"
timed .venv/bin/pyinfra -y inventory.py deploys/gpu_node.py

step "converge again: nothing may change"
converge_again

step "done; the VMs keep running (vagrant ssh gpu-node1; scripts/vagrant-demo.sh down removes them)"
