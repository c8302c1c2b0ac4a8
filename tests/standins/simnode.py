"""Helpers for the stand-in package and GPU simulator tests: a simulated node in a temp directory, the captured hosts."""

from __future__ import annotations

import calendar
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SIM = REPO / "rig" / "gpu_provision_rig" / "sim" / "gpusim.py"
#: The simulator's modules: its entry point ``gpusim.py`` and the modules beside it, shipped together.
SIM_MODULES = sorted(SIM.parent.glob("*.py"))
FIXTURES = REPO / "tests" / "fixtures"
FIXTURE_QUERY = (
    "index,uuid,name,pci.bus_id,driver_version,memory.total,mig.mode.current,mig.mode.pending,persistence_mode,"
    "ecc.mode.current,compute_mode,power.limit,clocks.max.sm,pcie.link.gen.max,pcie.link.width.current"
)
OPEN_VERSION_LINE = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@gpu-sim)  \n"


def fixture_clock(stamp: str) -> str:
    """Seconds since the epoch for a fixture's date line (read as UTC)."""
    return str(calendar.timegm(time.strptime(stamp)))


@dataclass
class SimNode:
    """One simulated node: config, state and 'loaded driver' in a temp directory."""

    root: Path
    env: dict[str, str] = field(default_factory=dict)

    def configure(self, gpus: list[dict]) -> None:
        (self.root / "gpus.json").write_text(json.dumps({"gpus": gpus}))

    def run(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run ``nvidia-smi ARGS`` (or ``gpu-sim ...`` when the first arg is gpu-sim)."""
        prog = list(args) if args and args[0] == "gpu-sim" else ["nvidia-smi", *args]
        proc = subprocess.run(
            [sys.executable, str(SIM), *prog], env=self.env, capture_output=True, text=True, timeout=60
        )
        if check:
            assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
        return proc

    def smi(self, *args: str) -> str:
        return self.run(*args, check=True).stdout

    def reboot(self) -> None:
        """A new boot id, and the tmpfs 'module loaded' marker survives only via the load unit."""
        boot = self.root / "boot_id"
        boot.write_text(str(int(boot.read_text()) + 1))

    def state(self) -> dict:
        return json.loads(self.run("gpu-sim", "state", check=True).stdout)


def fixture_gpu(index: int, uuid: str, bus: str, serial: str, **extra: object) -> dict:
    gpu: dict[str, object] = {"model": "H200", "index": index, "uuid": uuid, "pci_bus_id": bus, "serial": serial}
    gpu.update(extra)
    return gpu


H200_HOST = [
    fixture_gpu(
        0, "GPU-7a01bbbc-8780-9e2b-9ffe-56c5caa0e387", "00000000:00:06.0", "1653924059597",
        pdi="0xb788c45b3e07771b", module_id=3, cpu_affinity="0-15",
    )
]
H200X2_HOST = [
    fixture_gpu(
        0, "GPU-d3d4d48e-bb4a-7dfe-ba8d-0c72be5897cc", "00000000:00:06.0", "1653724065637",
        telemetry={"temperature": 35, "power_draw": 127}, cpu_affinity="0-31",
    ),
    fixture_gpu(
        1, "GPU-c7bb669a-6c98-84b7-fff1-a0bc7cbb3d54", "00000000:00:07.0", "1653724056318",
        telemetry={"temperature": 36, "power_draw": 120}, cpu_affinity="0-31",
    ),
]


