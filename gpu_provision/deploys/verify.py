"""Verification alone: ``pyinfra inventory.py gpu_provision.deploys.verify`` (or ``deploys/verify.py``)."""

from __future__ import annotations

from gpu_provision.deploys.gpu_node import REPORT_DIR
from gpu_provision.operations import commands
from gpu_provision.stages.verify import verify as _verify


def verify() -> None:
    """Run the verification agent on the current host and judge its report (``reports/verify/<node>.json``).

    ``gpu-provision verify`` runs the same agent, kept on the node by digest, with the same command, through the
    fleet runner, with a table at the end. Its commands are bounded like every deploy's
    (:func:`commands.deploy_timeout`).
    """
    _verify(report_dir=REPORT_DIR, _timeout=commands.deploy_timeout(commands.this_host()))
