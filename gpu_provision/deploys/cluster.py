"""The Kubernetes stage alone: ``pyinfra inventory.py gpu_provision.deploys.cluster`` (or ``deploys/cluster.py``)."""

from __future__ import annotations

from gpu_provision.stages.kubernetes import standalone


def cluster() -> None:
    """Join new nodes and bring the cluster's objects, labels and taints back to the cluster file.

    The host stack is left alone; ``gpu_node`` runs this stage too, after the host stack.
    """
    standalone()
