"""Verify GPU nodes: ``pyinfra inventory.py deploys/verify.py`` (or ``gpu-provision verify inventory.py``)."""

from gpu_provision.stages.verify import verify

verify(report_dir="reports/verify")
