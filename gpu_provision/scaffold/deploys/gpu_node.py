"""Bring GPU nodes to the state their cluster file describes.

    pyinfra inventory.py deploys/gpu_node.py --dry            # what would change, node by node
    pyinfra inventory.py deploys/gpu_node.py
    GPU_PROVISION_STAGES=preflight,driver pyinfra inventory.py deploys/gpu_node.py
    GPU_PROVISION_CLUSTER=one-node.yaml GPU_PROVISION_NODE=gpu-01 pyinfra @local deploys/gpu_node.py --dry

Stages run in order (preflight, driver, container runtime, container toolkit, device permissions, then MIG,
Kubernetes and verification where installed). The same deploy runs by name from the installed package:
``pyinfra inventory.py gpu_provision.deploys.gpu_node``.
"""

from gpu_provision.deploys import gpu_node

gpu_node()
