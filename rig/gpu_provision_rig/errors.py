"""The rig's one error family: every rig failure is a :class:`RigError`.

It derives from the product's :class:`~gpu_provision.errors.GpuProvisionError`, so the command lines print it as one
line (the traceback only with ``-v``) and callers catch rig and product failures alike.
"""

from __future__ import annotations

from gpu_provision.errors import GpuProvisionError


class RigError(GpuProvisionError):
    """The rig could not be brought to the asked state; the message says which step failed."""
