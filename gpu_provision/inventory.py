"""Turning a cluster file into pyinfra hosts and groups, and back from a pyinfra host to its typed node.

Groups: ``control_plane`` and ``workers`` by role, ``group_<name>`` per node group, ``gpu_<model>`` per GPU model
(``gpu_h200``, ``gpu_a100_80gb``) and ``no_gpu``. Each host's data holds its address and ``gpu_provision_node``, the
resolved node as plain data (so ``pyinfra ... debug-inventory`` can print it); code reads the typed node through
:func:`node_for`.

Connection settings (login user, port, key, sudo) sit where a pyinfra inventory puts them, so pyinfra's own
overrides win as pyinfra users expect: ``cluster.ssh`` is the ``all`` group's data (below ``group_data/*.py``,
host data, ``--data`` and ``--user``), and only what a node's own ``ssh:`` changes is host data (below ``--data`` and
``--user``). See docs/connection.md.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict
from typing import Any

from gpu_provision.errors import GpuProvisionError
from gpu_provision.spec import Cluster, Node, cluster_file_from_env, load_cluster
from gpu_provision.spec.model import SshSettings

_CACHE: dict[str, Cluster] = {}


def cluster(path: str) -> Cluster:
    """The cluster loaded from ``path`` (loaded once per process)."""
    if path not in _CACHE:
        _CACHE[path] = load_cluster(path)
    return _CACHE[path]


def _ident(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def connection_data(ssh: SshSettings) -> dict[str, Any]:
    """The pyinfra connection data for ``ssh`` (``ssh_user``, ``ssh_port``, ``ssh_key``, ``_sudo``...).

    A login user other than root runs operations through sudo. For root ``_sudo`` is left out rather than False:
    data outranks pyinfra's config, so a False here would silently cancel ``pyinfra --sudo``.
    """
    data: dict[str, Any] = {
        "ssh_user": ssh.user,
        "ssh_port": ssh.port,
        "ssh_strict_host_key_checking": "yes" if ssh.strict_host_key_checking else "no",
    }
    if ssh.user != "root":
        data["_sudo"] = True
    if ssh.key:
        data["ssh_key"] = ssh.key
    if ssh.known_hosts:
        data["ssh_known_hosts_file"] = ssh.known_hosts
    return data


def host_data(node: Node, source: str, cluster_ssh: SshSettings) -> dict[str, Any]:
    """pyinfra host data for ``node``: its address, the resolved node, and the connection settings its own ``ssh:``
    changes from ``cluster_ssh`` (the rest are the ``all`` group's data, which pyinfra's overrides outrank)."""
    defaults, settings = connection_data(cluster_ssh), connection_data(node.ssh)
    # A node's ssh: sets user, port and key and never drops a key, so only sudo can be on for the cluster yet off here
    # (a node logging in as root).
    own = {key: value for key, value in settings.items() if defaults.get(key) != value}
    if "_sudo" in defaults and "_sudo" not in settings:
        own["_sudo"] = False
    return {
        "ssh_hostname": node.address,
        **own,
        "gpu_provision_cluster_file": source,
        "gpu_provision_node": asdict(node),
    }


def _cli_connect_timeout(spec: Cluster) -> None:
    """Give the ``pyinfra`` command the cluster file's ``ssh.connect_timeout`` unless its config sets one.

    pyinfra reads the connect timeout from its config only (no host data carries it), and its command loads
    ``config.py`` before the inventory, into the config it then connects with; that config is the one in context
    while this inventory loads. The fleet commands load inventories without one and bound connections themselves
    (:mod:`gpu_provision.fleet`), so this changes nothing for them.
    """
    from pyinfra.api import Config
    from pyinfra.context import ctx_config

    if not ctx_config.isset() or not spec.nodes:
        return
    config = ctx_config.get()
    if config is not None and config.CONNECT_TIMEOUT == Config.CONNECT_TIMEOUT:
        config.CONNECT_TIMEOUT = max(node.ssh.connect_timeout for node in spec.nodes)


def groups(path: str) -> dict[str, Any]:
    """pyinfra inventory groups for the cluster file at ``path``: ``all`` as ``(hosts, data)`` with the cluster's
    connection settings as its data, the other groups as lists of ``(host, host data)``."""
    spec = cluster(path)
    _cli_connect_timeout(spec)
    out: dict[str, Any] = {"all": ([node.name for node in spec.nodes], connection_data(spec.ssh))}
    for node in spec.nodes:
        entry = (node.name, host_data(node, spec.source, spec.ssh))
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
