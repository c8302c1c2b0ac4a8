"""Cluster file from a Vagrant rig: turn ``vagrant ssh-config`` output into a gpu-provision cluster file.

The Vagrantfile at the repository root boots real Ubuntu VMs (libvirt or VirtualBox). To deploy to them::

    vagrant up
    vagrant ssh-config > .vagrant/ssh-config
    gpu-provision vagrant-cluster .vagrant/ssh-config -o inventory/vagrant.yaml [--gpu-model H200 --gpus 1]
    GPU_PROVISION_CLUSTER=inventory/vagrant.yaml pyinfra inventory.py deploys/gpu_node.py

pyinfra can also reach the VMs without a cluster file through its own connector (``pyinfra @vagrant ...``,
which runs ``vagrant ssh-config`` itself); that is enough for ad-hoc operations, but the project's deploys read node
settings (GPU model, MIG layout, runtime) from a cluster file, which is what this module writes.

Vagrant turns host key checking off in its ssh-config (each new VM makes new host keys); the cluster file follows
it with ``strict_host_key_checking: false`` only when the ssh-config says ``StrictHostKeyChecking no``.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass

import yaml

from gpu_provision.errors import GpuProvisionError


@dataclass(frozen=True)
class VagrantHost:
    """One ``Host`` block of ``vagrant ssh-config`` output."""

    name: str
    hostname: str
    port: int
    user: str
    identity_file: str | None
    strict_host_key_checking: bool


def parse_ssh_config(text: str) -> list[VagrantHost]:
    """The hosts in ``vagrant ssh-config`` output, in order; GpuProvisionError if a block lacks ``HostName``."""
    blocks: list[tuple[str, dict[str, str]]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        key, value = key.lower(), value.strip().strip('"')
        if key == "host":
            blocks.append((value, {}))
        elif blocks:
            blocks[-1][1].setdefault(key, value)
    hosts = []
    for name, opts in blocks:
        if "hostname" not in opts:
            raise GpuProvisionError(f"vagrant ssh-config: host {name} has no HostName")
        hosts.append(VagrantHost(
            name=name, hostname=opts["hostname"], port=int(opts.get("port", "22")), user=opts.get("user", "vagrant"),
            identity_file=opts.get("identityfile"),
            strict_host_key_checking=opts.get("stricthostkeychecking", "yes").lower() not in ("no", "off")))
    if not hosts:
        raise GpuProvisionError("vagrant ssh-config: no Host blocks found")
    return hosts


def node_name(vagrant_name: str) -> str:
    """A cluster-file node name for a Vagrant machine name (lower case; '_' and other characters become '-')."""
    name = re.sub(r"[^a-z0-9.-]+", "-", vagrant_name.lower()).strip("-.")
    if not name:
        raise GpuProvisionError(f"vagrant machine name {vagrant_name!r} gives no usable node name")
    return name


def cluster_document(hosts: list[VagrantHost], name: str = "vagrant", gpu_model: str | None = None,
                     gpus: int = 0, kubernetes: bool = True) -> dict[str, object]:
    """The cluster file (as data) for ``hosts``; GpuProvisionError if two hosts share an address.

    With ``kubernetes`` the first machine is the control plane and the others are workers; without, the file
    turns Kubernetes off.
    """
    addresses = Counter(h.hostname for h in hosts)
    shared = sorted(a for a, n in addresses.items() if n > 1)
    if shared:
        raise GpuProvisionError(
            f"vagrant ssh-config: several machines are reached at {', '.join(shared)} (ports differ); give each its "
            "own address, as the project's Vagrantfile does with 127.0.10.N for VirtualBox")
    user = Counter(h.user for h in hosts).most_common(1)[0][0]
    ssh: dict[str, object] = {"user": user}
    if not all(h.strict_host_key_checking for h in hosts):
        ssh["strict_host_key_checking"] = False
    nodes = []
    for i, h in enumerate(hosts):
        node: dict[str, object] = {"name": node_name(h.name), "address": h.hostname}
        if kubernetes:
            node["role"] = "control-plane" if i == 0 else "worker"
        node_ssh: dict[str, object] = {}
        if h.user != user:
            node_ssh["user"] = h.user
        if h.port != 22:
            node_ssh["port"] = h.port
        if h.identity_file:
            node_ssh["key"] = h.identity_file
        if node_ssh:
            node["ssh"] = node_ssh
        if gpu_model:
            node["gpus"] = {"model": gpu_model, "count": gpus}
        nodes.append(node)
    cluster: dict[str, object] = {"name": name, "ssh": ssh}
    # Vagrant keeps each machine's key under .vagrant/; a cluster file reads controller files only from its own
    # directory and the ones it names.
    key_dirs = sorted({os.path.dirname(h.identity_file) for h in hosts if h.identity_file})
    if key_dirs:
        cluster["controller_dirs"] = key_dirs
    if not kubernetes:
        cluster["kubernetes"] = {"enabled": False}
    return {"version": "v1", "cluster": cluster, "nodes": nodes}


def cluster_yaml(hosts: list[VagrantHost], name: str = "vagrant", gpu_model: str | None = None, gpus: int = 0,
                 kubernetes: bool = True) -> str:
    """The cluster file for ``hosts`` as YAML text with a header saying where it came from."""
    header = ("# Generated by `gpu-provision vagrant-cluster` from `vagrant ssh-config`.\n"
              "# Regenerate after `vagrant up`: addresses, ports and keys change with the VMs.\n")
    return header + yaml.safe_dump(cluster_document(hosts, name, gpu_model, gpus, kubernetes), sort_keys=False)
