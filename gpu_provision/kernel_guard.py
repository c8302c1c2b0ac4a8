"""The kernel guard: a kernel installed but not running must have what the GPU driver needs before a reboot.

The next boot starts the newest installed kernel (the probe's ``kernel_pending``). When it is not the running one
and the node's driver works on the running kernel, the pending kernel needs the NVIDIA modules (built by DKMS, or
Ubuntu's precompiled package, or a vendor's module files) and, where DKMS builds them, its headers; otherwise a
reboot would bring the node up without a GPU driver. The deploy does not reboot such a node, and drift and
preflight report it.
"""

from __future__ import annotations

from gpu_provision.spec.model import Node
from gpu_provision.state import NodeStateData

#: The check name preflight and drift report the guard under.
CHECK = "kernel-guard"


#: The NVIDIA kernel module's loaded names: NVIDIA's, and Debian's, which installs it as ``nvidia-current.ko``.
LOADED_NAMES = ("nvidia", "nvidia_current")


def _driver_on_running(state: NodeStateData, running: str) -> bool:
    """Whether the running kernel has an NVIDIA driver to lose (modules for it, or the module loaded)."""
    modules = state.system.get("nvidia_modules") or {}
    return bool(modules.get(running)) or any(m in LOADED_NAMES for m in state.system.get("modules", []))


def blocked_reboot(node: Node, state: NodeStateData, dkms: bool = True) -> str | None:
    """Why a reboot would leave ``node`` without a GPU driver, or None when it may reboot.

    + dkms: the driver's modules are built by DKMS on the node, so the pending kernel's headers are needed too

    A probe that did not report the modules (an older node bundle) gives no reason: the guard never refuses on
    what it could not read.
    """
    system = state.system
    running, pending = str(system.get("kernel", "")), str(system.get("kernel_pending", ""))
    modules = system.get("nvidia_modules")
    if not node.has_gpus or not pending or pending == running or not isinstance(modules, dict):
        return None
    if not _driver_on_running(state, running):
        return None
    if not modules.get(pending):
        return (f"kernel {pending} is installed but has no NVIDIA modules; a reboot would leave the node without "
                "a GPU driver")
    if dkms and modules.get(pending) == "dkms" and not (system.get("headers") or {}).get(pending):
        return (f"kernel {pending} is installed but has no headers; DKMS could not rebuild the NVIDIA modules for "
                "it and a reboot would leave the node without a GPU driver")
    return None
