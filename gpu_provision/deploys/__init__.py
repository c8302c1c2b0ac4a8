"""The deploys as functions of the installed package, so pyinfra can run them by name from any directory.

    pyinfra inventory.py gpu_provision.deploys.gpu_node       # every stage (deploys/gpu_node.py)
    pyinfra inventory.py gpu_provision.deploys.cluster        # the Kubernetes stage alone (deploys/cluster.py)
    pyinfra inventory.py gpu_provision.deploys.verify         # verification alone (deploys/verify.py)

pyinfra reads ``a.b.c`` as the attribute ``c`` of module ``a.b``; the names here are the functions (each imported
over its own submodule's name), and the thin files under ``deploys/`` call the same functions.
"""

from gpu_provision.deploys.cluster import cluster
from gpu_provision.deploys.gpu_node import gpu_node
from gpu_provision.deploys.verify import verify

__all__ = ["cluster", "gpu_node", "verify"]
