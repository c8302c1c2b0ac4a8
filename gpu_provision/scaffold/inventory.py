"""pyinfra inventory: the hosts and groups of the cluster file.

    pyinfra inventory.py deploys/gpu_node.py                  # ./cluster.yaml
    GPU_PROVISION_CLUSTER=site.yaml pyinfra inventory.py deploys/gpu_node.py

The cluster file is the one GPU_PROVISION_CLUSTER names, else cluster.yaml in the current directory; without either
this stops with a line saying how to name one. An invalid file stops here too, before any connection, with one line
per problem.
"""

import sys as _sys

from gpu_provision.errors import GpuProvisionError as _GpuProvisionError
from gpu_provision.inventory import groups as _groups
from gpu_provision.spec import cluster_file_from_env as _cluster_file_from_env

try:
    globals().update(_groups(_cluster_file_from_env()))
except _GpuProvisionError as _exc:
    print(_exc, file=_sys.stderr)
    _sys.exit(2)
