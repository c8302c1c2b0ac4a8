"""Which cluster file to read when a command names none.

``GPU_PROVISION_CLUSTER`` names it; otherwise ``cluster.yaml`` in the current directory (the layout
``gpu-provision init DIR`` writes). There is no fallback beyond that: a default that pointed at an example file would
send a deploy to the example's machines.
"""

from __future__ import annotations

import os

from gpu_provision.errors import GpuProvisionError

CLUSTER_ENV = "GPU_PROVISION_CLUSTER"
#: The cluster file of a directory written by ``gpu-provision init``.
LOCAL_CLUSTER_FILE = "cluster.yaml"

NO_CLUSTER_FILE = (
    f"no cluster file: set {CLUSTER_ENV}=FILE (e.g. {CLUSTER_ENV}=site/cluster.yaml pyinfra inventory.py "
    f"deploys/gpu_node.py), or run from a directory that holds {LOCAL_CLUSTER_FILE} "
    "('gpu-provision init DIR' writes one)"
)


def cluster_file_from_env() -> str:
    """The cluster file named by ``GPU_PROVISION_CLUSTER``, else ``./cluster.yaml``; neither is an error.

    The error is a :class:`~gpu_provision.errors.GpuProvisionError` whose message says how to name a file, so the
    inventory and the CLI stop with that one line (exit status 2) before any connection.
    """
    named = os.environ.get(CLUSTER_ENV)
    if named:
        return named
    if os.path.isfile(LOCAL_CLUSTER_FILE):
        return LOCAL_CLUSTER_FILE
    raise GpuProvisionError(NO_CLUSTER_FILE)
