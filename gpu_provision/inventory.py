"""Turning a cluster file into pyinfra hosts and groups, and back from a pyinfra host to its typed node.

Groups: ``control_plane`` and ``workers`` by role, ``group_<name>`` per node group, ``gpu_<model>`` per GPU model
(``gpu_h200``, ``gpu_a100_80gb``) and ``no_gpu``. Each host's data holds the SSH settings pyinfra's connector reads
and ``gpu_provision_node``, the resolved node as plain data (so ``pyinfra ... debug-inventory`` can print it); code
reads the typed node through :func:`node_for`.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict
from typing import Any

from gpu_provision.errors import GpuProvisionError
from gpu_provision.spec import Cluster, Node, cluster_file_from_env, load_cluster

_CACHE: dict[str, Cluster] = {}


def cluster(path: str) -> Cluster:
    """The cluster loaded from ``path`` (loaded once per process)."""
    if path not in _CACHE:
        _CACHE[path] = load_cluster(path)
    return _CACHE[path]


def _ident(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def host_data(node: Node, source: str) -> dict[str, Any]:
    """pyinfra host data for ``node``: SSH connector settings plus the resolved node."""
    data: dict[str, Any] = {
        "ssh_hostname": node.address,
        "ssh_user": node.ssh.user,
        "ssh_port": node.ssh.port,
        "ssh_strict_host_key_checking": "yes" if node.ssh.strict_host_key_checking else "no",
        "gpu_provision_cluster_file": source,
        "gpu_provision_node": asdict(node),
    }
    if node.ssh.key:
        data["ssh_key"] = node.ssh.key
    if node.ssh.known_hosts:
        data["ssh_known_hosts_file"] = node.ssh.known_hosts
    if node.ssh.user != "root":
        data["_sudo"] = True
    return data


def groups(path: str) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """pyinfra inventory groups for the cluster file at ``path``."""
    spec = cluster(path)
    out: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for node in spec.nodes:
        entry = (node.name, host_data(node, spec.source))
        names = ["control_plane" if node.role == "control-plane" else "workers"]
        if node.group:
            names.append(f"group_{_ident(node.group)}")
        names.append(f"gpu_{_ident(node.gpus.model)}" if node.has_gpus and node.gpus.model else "no_gpu")
        for name in names:
            out.setdefault(name, []).append(entry)
    return out


NODE_ENV = "GPU_PROVISION_NODE"


def cluster_for(host: Any) -> Cluster:
    """The typed cluster a pyinfra host belongs to.

    Hosts from ``inventory.py`` carry their cluster file; others (``pyinfra @local ...``) use
    ``GPU_PROVISION_CLUSTER``, else ``./cluster.yaml`` (:func:`~gpu_provision.spec.cluster_file_from_env`).
    """
    return cluster(host.data.get("gpu_provision_cluster_file") or cluster_file_from_env())


def node_for(host: Any) -> Node:
    """The typed node behind a pyinfra host.

    Hosts from ``inventory.py`` are named after their node. A connector host such as ``@local`` names its node
    with ``GPU_PROVISION_NODE`` (e.g. ``GPU_PROVISION_NODE=gpu-01 pyinfra @local deploys/gpu_node.py --dry`` on
    the node itself).
    """
    name = host.name
    if name.startswith("@"):
        name = os.environ.get(NODE_ENV, "")
        if not name:
            raise GpuProvisionError(f"{host.name}: set {NODE_ENV} to the node this host is in the cluster file")
    try:
        return cluster_for(host).node(name)
    except KeyError:
        raise GpuProvisionError(f"{cluster_for(host).source}: no node named '{name}'") from None
