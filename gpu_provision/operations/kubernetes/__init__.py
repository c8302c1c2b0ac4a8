"""Kubernetes operations, one module per concern:

``prerequisites`` (swap, kernel modules, sysctls), ``membership`` (``kubeadm init`` and ``join`` with their tokens),
``manifests`` (the CNI and the applied manifests), ``labels`` (node labels and taints), and ``probe`` (what they all
read from the node's batched probe). Each operation yields nothing once the node is as wanted.
"""
