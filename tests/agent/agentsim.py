"""A simulated GPU node for running the whole verification agent: the project's GPU simulator as nvidia-smi,
plus PCI, /dev and /proc trees in a temp directory, pointed at through the expectations' ``paths``.

There is no libcuda.so.1 here, so the CUDA checks are skipped with that reason and everything else runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_provision.verify.expect import build_expectations

REPO = Path(__file__).resolve().parents[2]
SIM = REPO / "rig" / "gpu_provision_rig" / "sim" / "gpusim.py"
VERSION_LINE = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@gpu-sim)  \n"

H200_GPUS = [
    {"model": "H200", "index": 0, "uuid": "GPU-d3d4d48e-bb4a-7dfe-ba8d-0c72be5897cc",
     "pci_bus_id": "00000000:00:06.0", "serial": "1653724065637"},
    {"model": "H200", "index": 1, "uuid": "GPU-c7bb669a-6c98-84b7-fff1-a0bc7cbb3d54",
     "pci_bus_id": "00000000:00:07.0", "serial": "1653724056318"},
]


@dataclass
class SimulatedNode:
    """Paths of one simulated node and helpers to change it."""

    root: Path
    env: dict[str, str]

    @property
    def paths(self) -> dict[str, str]:
        # The simulator marks its "loaded module" in run/version, its stand-in for /proc/driver/nvidia/version.
        return {"sysfs": str(self.root / "sys"), "dev": str(self.root / "dev"), "proc": str(self.root / "proc"),
                "nvidia_smi": str(self.root / "bin" / "nvidia-smi"), "libcuda": "libcuda.so.1",
                "driver_version_file": str(self.root / "run" / "version")}

    def configure(self, gpus: list[dict[str, Any]], on_bus: list[dict[str, Any]] | None = None) -> None:
        """Simulate ``gpus`` (driver view) with ``on_bus`` (default: the same) as PCI devices and device files."""
        (self.root / "gpus.json").write_text(json.dumps({"gpus": gpus}))
        pci = self.root / "sys" / "bus" / "pci" / "devices"
        shutil.rmtree(pci, ignore_errors=True)
        pci.mkdir(parents=True)
        bridge = pci / "0000:00:00.0"
        bridge.mkdir()
        for name, value in (("vendor", "0x8086"), ("device", "0x0d57"), ("class", "0x060000")):
            (bridge / name).write_text(value + "\n")
        for gpu in on_bus if on_bus is not None else gpus:
            bus = gpu["pci_bus_id"].lower()[4:]
            entry = pci / bus
            entry.mkdir()
            (entry / "vendor").write_text("0x10de\n")
            (entry / "device").write_text("0x2335\n")
            (entry / "class").write_text("0x030200\n")
        dev = self.root / "dev"
        shutil.rmtree(dev, ignore_errors=True)
        dev.mkdir()
        for name in ["nvidiactl"] + [f"nvidia{g['index']}" for g in gpus]:
            (dev / name).write_text("")
            os.chmod(dev / name, 0o666)

    def smi(self, *args: str) -> str:
        """Run the simulated nvidia-smi (to change MIG state in a test) and return its output."""
        done = subprocess.run([str(self.root / "bin" / "nvidia-smi"), *args], capture_output=True, text=True,
                              check=True)
        return done.stdout

    def expect(self, count: int = 2, **kwargs: Any) -> dict[str, Any]:
        """Expectations for this node (H200 x ``count``), paths pointing at the simulated trees."""
        kwargs.setdefault("driver_version", "580.159.04")
        kwargs.setdefault("cuda_min", "12.4")
        kwargs.setdefault("device_permissions", {"group": "root", "mode": "0666"})
        return build_expectations("sim-node", "H200", count, paths=self.paths, **kwargs).to_dict()


def by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The report's checks keyed by id."""
    return {check["id"]: check for check in report["checks"]}
