"""gpu-provision: declarative GPU node provisioning on pyinfra.

One cluster file (``version: v1``) describes the nodes, their GPU stack and the Kubernetes cluster around them.
``gpu_provision.spec`` loads and validates it; ``gpu_provision.stages`` holds the pyinfra ``@deploy`` stages that
bring each node to the described state; ``gpu_provision.node.verify`` is the node-side verification agent.
"""

__version__ = "0.1.0"
