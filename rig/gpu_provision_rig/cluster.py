"""Turn a gpu-provision cluster file into the rig's node list.

Rig cluster files name each node by its loopback address ``127.0.10.N`` (the address the controller connects to);
the GPU model and count come from the node's resolved ``gpus`` settings.
"""

from __future__ import annotations

import logging
from pathlib import Path

from gpu_provision_rig.config import RigNode, RigPaths

log = logging.getLogger(__name__)


def nodes_from_cluster(path: str | Path, paths: RigPaths | None = None) -> list[RigNode]:
    """The rig nodes described by the cluster file at ``path``.

    Warns when the file's ssh key or known_hosts is not the one the rig writes (the deploy would then not log in).
    """
    from gpu_provision.spec import load_cluster

    cluster = load_cluster(path)
    paths = paths or RigPaths.from_env()
    base = Path(path).resolve().parent
    for label, given, rig_path in (("key", cluster.ssh.key, paths.client_key),
                                   ("known_hosts", cluster.ssh.known_hosts, paths.known_hosts)):
        if given is not None and (base / Path(given).expanduser()).resolve() != rig_path.resolve():
            log.warning("%s: ssh.%s is %s but the rig writes %s", path, label, given, rig_path)
    return [RigNode(name=n.name, ssh_address=n.address, gpu_model=n.gpus.model, gpu_count=n.gpus.count)
            for n in cluster.nodes]
