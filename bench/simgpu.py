"""Simulated GPUs for the loopback fleet, so ``gpu-provision verify`` has something to verify on every host.

The fleet's hosts share one root without systemd or kernel modules, so the rig's stand-in driver package is not
installed there; instead its GPU simulator (``rig/gpu_provision_rig/sim``, the program behind the stand-in
``nvidia-smi``) is laid out under :data:`ROOT` with its data files, a PCI tree, device files and the "loaded
module" line, exactly as the agent tests lay it out in a temporary directory, and the expectations point the
agent there through their ``paths`` (``sysfs``, ``dev``, ``proc``, ``nvidia_smi``, ``driver_version_file``). No
``libcuda.so.1`` exists, so the agent skips its CUDA checks with that reason; every other check runs. Every host
sees the same two H200 GPUs; the simulator's state is shared under its own lock.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from gpu_provision.verify.expect import build_expectations

REPO = Path(__file__).resolve().parents[1]
SIM = REPO / "rig" / "gpu_provision_rig" / "sim"
#: Where the simulated node lives inside the fleet's root.
ROOT = "/opt/gpu-sim-node"
DRIVER = "580.159.04"
VERSION_LINE = f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {DRIVER}  Release Build  (dvs-builder@gpu-sim)  \n"
GPUS = [
    {"model": "H200", "index": 0, "uuid": "GPU-d3d4d48e-bb4a-7dfe-ba8d-0c72be5897cc",
     "pci_bus_id": "00000000:00:06.0", "serial": "1653724065637"},
    {"model": "H200", "index": 1, "uuid": "GPU-c7bb669a-6c98-84b7-fff1-a0bc7cbb3d54",
     "pci_bus_id": "00000000:00:07.0", "serial": "1653724056318"},
]


def environment(node: str = ROOT) -> dict[str, str]:
    """The simulator's settings, as paths of the simulated node at ``node`` (as the hosts see it)."""
    return {"GPU_SIM_CONFIG": f"{node}/gpus.json", "GPU_SIM_STATE_DIR": f"{node}/state",
            "GPU_SIM_DATA_DIR": f"{node}/data", "GPU_SIM_LIB_DIR": f"{node}/lib", "GPU_SIM_RUN_DIR": f"{node}/run",
            "GPU_SIM_BOOT_ID_FILE": f"{node}/boot_id", "GPU_SIM_PERSISTENCED_PID": f"{node}/persistenced.pid"}


def paths(node: str = ROOT) -> dict[str, str]:
    """The expectations' ``paths`` that point the agent at the simulated node at ``node``."""
    return {"sysfs": f"{node}/sys", "dev": f"{node}/dev", "proc": f"{node}/proc",
            "nvidia_smi": f"{node}/bin/nvidia-smi", "libcuda": "libcuda.so.1",
            "driver_version_file": f"{node}/run/version"}


def lay_out(upper: Path, node: str = ROOT) -> None:
    """Write the simulated node into the fleet's overlay upper directory (``upper`` is the fleet root's ``/``),
    at ``node`` as the hosts see it."""
    root = upper / node.lstrip("/")
    shutil.rmtree(root, ignore_errors=True)
    (root / "sim").mkdir(parents=True)
    for module in SIM.glob("*.py"):  # the simulator is one entry point and the modules beside it
        shutil.copy(module, root / "sim" / module.name)
    shutil.copytree(SIM / "templates", root / "sim" / "templates")
    shutil.copy(REPO / "gpu_provision" / "node" / "catalog.py", root / "sim" / "catalog.py")
    (root / "data" / "gpus").mkdir(parents=True)
    for model in (REPO / "gpu_provision" / "data" / "gpus").glob("*.json"):
        shutil.copy(model, root / "data" / "gpus" / model.name)
    shutil.copy(SIM / "hardware.json", root / "data" / "hardware.json")
    (root / "lib").mkdir()
    (root / "lib" / "driver.json").write_text(json.dumps({"version": DRIVER, "cuda_version": "13.0"}))
    (root / "run").mkdir()
    (root / "run" / "version").write_text(VERSION_LINE)
    (root / "boot_id").write_text("1")
    (root / "proc").mkdir()
    (root / "state").mkdir()
    (root / "gpus.json").write_text(json.dumps({"gpus": GPUS}))
    pci = root / "sys" / "bus" / "pci" / "devices"
    pci.mkdir(parents=True)
    for gpu in GPUS:
        entry = pci / gpu["pci_bus_id"].lower()[4:]
        entry.mkdir()
        for name, value in (("vendor", "0x10de"), ("device", "0x2335"), ("class", "0x030200")):
            (entry / name).write_text(value + "\n")
    dev = root / "dev"
    dev.mkdir()
    for name in ["nvidiactl"] + [f"nvidia{g['index']}" for g in GPUS]:
        (dev / name).write_text("")
        os.chmod(dev / name, 0o666)
    (root / "bin").mkdir()
    exports = "".join(f"export {k}='{v}'\n" for k, v in environment(node).items())
    wrapper = root / "bin" / "nvidia-smi"
    # The simulator needs the standard library alone: without site (-S) and PYTHON* variables (-E) its start-up is
    # about a third cheaper, and the fleet measures the agent rather than the stand-in's interpreter (a real
    # nvidia-smi is a compiled program).
    wrapper.write_text(f"#!/bin/sh\n{exports}exec python3 -E -S {node}/sim/gpusim.py nvidia-smi \"$@\"\n")
    wrapper.chmod(0o755)


def converge_lines(node: str = ROOT) -> list[str]:
    """Shell lines for the fleet's converge script: persistence mode on, as the expectations want."""
    return [f"{node}/bin/nvidia-smi -pm 1 >/dev/null"]


def expectations(node: str = ROOT) -> dict[str, Any]:
    """What every fleet host is verified against: two H200 GPUs, the simulator's driver, the simulated paths."""
    return build_expectations("fleet", "H200", len(GPUS), driver_version=DRIVER, cuda_min="12.4",
                              device_permissions={"group": "root", "mode": "0666"}, paths=paths(node)).to_dict()
