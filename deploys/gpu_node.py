"""Bring GPU nodes to the state their cluster file describes.

    pyinfra inventory.py deploys/gpu_node.py
    GPU_PROVISION_CLUSTER=one-node.yaml GPU_PROVISION_NODE=gpu-01 pyinfra @local deploys/gpu_node.py --dry
    GPU_PROVISION_STAGES=preflight,driver pyinfra inventory.py deploys/gpu_node.py

Stages run in order (preflight, driver, container runtime, container toolkit, device permissions, then MIG,
Kubernetes and verification where installed); see gpu_provision/stages/pipeline.py.
"""

from gpu_provision.stages.pipeline import gpu_node

gpu_node()
