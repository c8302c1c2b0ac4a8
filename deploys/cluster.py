"""The Kubernetes stage alone: ``pyinfra inventory.py deploys/cluster.py``.

Joins new nodes and brings the cluster's objects, labels and taints back to the cluster file without touching the
host stack (``deploys/gpu_node.py`` runs every stage, this one included). From the installed package:
``pyinfra inventory.py gpu_provision.deploys.cluster``.
"""

from gpu_provision.deploys import cluster

cluster()
