"""Verification alone: ``pyinfra inventory.py gpu_provision.deploys.verify`` (or ``deploys/verify.py``)."""

from __future__ import annotations

from gpu_provision.deploys.gpu_node import REPORT_DIR
from gpu_provision.stages.verify import verify as _verify


def verify() -> None:
    """Run the verification agent on the current host and judge its report (``reports/verify/<node>.json``).

    ``gpu-provision verify`` runs the same stage through the fleet runner, with a table at the end.
    """
    _verify(report_dir=REPORT_DIR)
