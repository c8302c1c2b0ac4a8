"""Verify GPU nodes: ``pyinfra inventory.py deploys/verify.py`` (or ``gpu-provision verify inventory.py``).

From the installed package: ``pyinfra inventory.py gpu_provision.deploys.verify``.
"""

from gpu_provision.deploys import verify

verify()
