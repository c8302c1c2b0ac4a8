"""Changes to a whole simulated GPU: MIG mode, reset and legacy persistence mode (stand-in, not NVIDIA software).

A GPU that a registered process or a handle-holding daemon uses keeps its mode pending and refuses a reset, as the
MIG user guide describes.
"""

from __future__ import annotations

from gpusim_errors import RC_NOT_SUPPORTED, RC_OTHER
from gpusim_hardware import Gpu
from gpusim_output import Out
from gpusim_state import State, require_root


def set_mig_mode(out: Out, gpus: list[Gpu], state: State, enable: bool) -> int:
    """``nvidia-smi [-i N] -mig 0|1``: immediate when idle, pending with "In use by another client"
    while the GPU is busy (then a reset or, on Ampere, a reboot makes it effective)."""
    rc = 0
    for gpu in gpus:
        if not gpu.mig_capable:
            out.err(f"Unable to {'enable' if enable else 'disable'} MIG Mode for GPU {gpu.bus_id}: Not Supported")
            rc = RC_NOT_SUPPORTED
            continue
        require_root(("enable" if enable else "disable") + " MIG Mode", gpu)
        gs = state.gpu_state(gpu)
        if not enable and gs["gis"]:
            out.err(f"Unable to disable MIG Mode for GPU {gpu.bus_id}: In use by another client")
            rc = RC_OTHER
            continue
        gs["mig_pending"] = enable
        if state.busy(gpu):
            word = "enable" if enable else "disable"
            out.line(f"Warning: MIG mode is in pending {word} state for GPU {gpu.bus_id}:In use by another client")
            out.line(
                f"{gpu.bus_id} is currently being used by one or more other processes (e.g. CUDA application or a "
                "monitoring application such as another instance of nvidia-smi). Please first kill all processes "
                "using the device and retry the command or reboot the system to make MIG mode effective."
            )
            continue
        gs["mig_current"] = enable
        out.line(f"{'Enabled' if enable else 'Disabled'} MIG Mode for GPU {gpu.bus_id}")
    if rc == 0:
        out.line("All done.")
    return rc


def reset(out: Out, gpus: list[Gpu], state: State, explicit: bool) -> int:
    """``nvidia-smi -r [-i N]``: refused while the GPU is in use; applies a pending MIG mode."""
    for gpu in gpus:
        require_root("reset GPU", gpu)
        if state.busy(gpu):
            out.line(f"GPU {gpu.bus_id} is currently in use by another process.")
            out.line("")
            out.line(
                "1 device is currently being used by one or more other processes (e.g., Fabric Manager, CUDA "
                "application, graphics application such as an X server, or a monitoring application such as "
                "another instance of nvidia-smi). Please first kill all processes using this device and all "
                "compute applications running in the system."
            )
            return RC_OTHER
    for gpu in gpus:
        gs = state.gpu_state(gpu)
        gs["gis"] = []
        gs["mig_current"] = gs["mig_pending"]
        out.line(f"GPU {gpu.bus_id} was successfully reset.")
    out.line("All done.")
    return 0


def set_persistence(out: Out, gpus: list[Gpu], state: State, enable: bool) -> int:
    """``nvidia-smi -pm 0|1`` (legacy persistence mode; lost at reboot)."""
    for gpu in gpus:
        require_root("set persistence mode", gpu)
        state.gpu_state(gpu)["legacy_persistence"] = enable
        word = "Enabled" if enable else "Disabled"
        out.line(f"{word} Legacy persistence mode for GPU {gpu.bus_id}.")
    out.line("All done.")
    return 0
