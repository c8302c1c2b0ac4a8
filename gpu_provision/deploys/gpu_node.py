"""Every stage of a GPU node: ``pyinfra inventory.py gpu_provision.deploys.gpu_node`` (or ``deploys/gpu_node.py``)."""

from __future__ import annotations

from gpu_provision.stages.pipeline import gpu_node as _pipeline

REPORT_DIR = "reports/verify"


def gpu_node() -> None:
    """Bring the current host to its cluster file's state: the stages named by ``GPU_PROVISION_STAGES``, else all.

    Verification reports land in ``reports/verify/<node>.json`` under the directory pyinfra runs in.
    """
    _pipeline(report_dir=REPORT_DIR)
