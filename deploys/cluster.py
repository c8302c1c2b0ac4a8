"""The Kubernetes stage alone: ``pyinfra inventory.py deploys/cluster.py``.

Joins new nodes and brings the cluster's objects, labels and taints back to the cluster file without touching the
host stack (``deploys/gpu_node.py`` runs every stage, this one included).
"""

from gpu_provision.stages.kubernetes import standalone

standalone()
