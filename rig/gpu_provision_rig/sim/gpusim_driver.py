"""The simulated NVIDIA driver: the installed library's version and the "loaded" kernel module's (stand-in, not
NVIDIA software).

The driver package writes ``driver.json`` (library version); the stand-in module load writes the module's version
line to the run directory (what ``/proc/driver/nvidia/version`` holds on a real host). nvidia-smi needs both, equal.
"""

from __future__ import annotations

import os

from gpusim_config import lib_dir, load_json, run_dir
from gpusim_errors import RC_DRIVER_NOT_LOADED, RC_LIB_MISMATCH, SimError

NOT_LOADED_MESSAGE = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)


def driver_info() -> dict:
    """The installed user-space driver (library) version, from the driver package."""
    try:
        return load_json(os.path.join(lib_dir(), "driver.json"))
    except FileNotFoundError as exc:
        raise SimError("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system.", 12) from exc


def loaded_module_version() -> str | None:
    """Version of the 'loaded kernel module' (written at module load), or None if not loaded."""
    try:
        with open(os.path.join(run_dir(), "version"), encoding="utf-8") as fh:
            first = fh.readline()
    except FileNotFoundError:
        return None
    for token in first.split():
        if token.count(".") >= 1 and token.replace(".", "").isdigit():
            return token
    return None


def check_driver() -> dict:
    """Fail like nvidia-smi does when the module is not loaded or does not match the library."""
    info = driver_info()
    module = loaded_module_version()
    if module is None:
        raise SimError(NOT_LOADED_MESSAGE.rstrip("\n"), RC_DRIVER_NOT_LOADED)
    if module != info["version"]:
        major_minor = ".".join(info["version"].split(".")[:2])
        raise SimError(
            f"Failed to initialize NVML: Driver/library version mismatch\nNVML library version: {major_minor}",
            RC_LIB_MISMATCH,
        )
    return info
