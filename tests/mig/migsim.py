"""A simulated node for the MIG tests: the rig's GPU simulator behind a stand-in ``nvidia-smi``, stand-in
``systemctl`` and ``modprobe``, and the node bundle (whose ``mig-apply`` entry is the applier) installed as the deploy installs it
(used by conftest.py's fixtures)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import simtree

from gpu_provision.bundle import BUNDLE_NAME
from gpu_provision.bundle import write as write_bundle
from gpu_provision.mig.install import ENTRY

REPO = Path(__file__).resolve().parents[2]
SIM = REPO / "rig" / "gpu_provision_rig" / "sim" / "gpusim.py"
STANDINS = Path(__file__).resolve().parent / "standins"
H200_FIXTURES = REPO / "tests" / "fixtures" / "h200"
MODULE_LINE = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (gpu-sim)\n"

#: Two H200s as the captured two-GPU host has them (tests/fixtures/h200x2).
H200X2 = [
    {"model": "H200", "index": 0, "uuid": "GPU-d3d4d48e-bb4a-7dfe-ba8d-0c72be5897cc", "pci_bus_id": "00000000:00:06.0",
     "serial": "1653724065637"},
    {"model": "H200", "index": 1, "uuid": "GPU-c7bb669a-6c98-84b7-fff1-a0bc7cbb3d54", "pci_bus_id": "00000000:00:07.0",
     "serial": "1653724056318"},
]


@dataclass
class MigNode:
    """A simulated node: GPU simulator state, the installed node bundle, stand-in services."""

    root: Path
    env: dict[str, str]

    @property
    def bundle(self) -> Path:
        return self.root / "lib" / BUNDLE_NAME

    @property
    def applier(self) -> list[str]:
        """The applier's command line as the deploy and the boot unit run it."""
        return ["python3", str(self.bundle), ENTRY]

    def sh(self, *argv: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run a program on the node (PATH finds the stand-ins first)."""
        proc = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=300)
        if check:
            assert proc.returncode == 0, (argv, proc.stdout, proc.stderr)
        return proc

    def apply(self, layout: dict, *extra: str, command: str = "apply") -> subprocess.CompletedProcess[str]:
        """Write ``layout`` (mig-parted v1) as the node's layout file and run the applier on it."""
        path = self.root / "mig-layout.yaml"
        path.write_text(json.dumps(layout, indent=2))
        return self.sh(*self.applier, command, "--layout", str(path), *extra)

    def lgi(self, gpu: int = 0) -> list[str]:
        """``profile@start:size`` of GPU ``gpu``'s instances, from the simulated ``nvidia-smi mig -lgi``."""
        out = self.sh("nvidia-smi", "mig", "-lgi", "-i", str(gpu)).stdout
        rows = []
        for line in out.splitlines():
            parts = line.strip("| ").split()
            if len(parts) == 6 and parts[1] == "MIG":
                rows.append((int(parts[5].split(":")[0]), f"{parts[2]}@{parts[5]}"))
        return [r for _, r in sorted(rows)]

    def mode(self, gpu: int = 0) -> str:
        return self.sh("nvidia-smi", "-i", str(gpu), "--query-gpu=mig.mode.current,mig.mode.pending",
                       "--format=csv,noheader", check=True).stdout.strip()

    def start_units(self, *units: str) -> None:
        """Start units through the systemctl stand-in (holder units then hold the GPUs), and forget the log."""
        self.sh("systemctl", "start", *units, check=True)
        (self.root / "systemctl.log").unlink()

    def service_log(self) -> list[str]:
        log = self.root / "systemctl.log"
        return log.read_text().splitlines() if log.exists() else []

    def run_pods(self, pods: dict[str, dict]) -> None:
        """Pods the crictl stand-in lists (``{ID: {"labels": ..., "state": "ready", "containers": {CID: NAME}}}``)."""
        (self.root / "crictl.json").write_text(json.dumps({"pods": pods}))

    def crictl_log(self) -> list[str]:
        log = self.root / "crictl.log"
        return log.read_text().splitlines() if log.exists() else []

    def reboot(self) -> None:
        """A new boot id: the simulator drops instances and (Hopper) MIG mode, as a real reboot does."""
        boot = self.root / "boot_id"
        boot.write_text(str(int(boot.read_text()) + 1))

    @property
    def record(self) -> Path:
        """The applier's record of the units and modules it took down (``$GPU_PROVISION_MIG_RECORD``)."""
        return Path(self.env["GPU_PROVISION_MIG_RECORD"])

    @property
    def module_args(self) -> list[str]:
        """Applier options that point it at the stand-in kernel's ``/sys`` and ``/proc``."""
        return ["--sysfs", self.env["MODPROBE_SYSFS"], "--procfs", self.env["MODPROBE_PROCFS"]]

    def modules(self) -> list[str]:
        """Names of the loaded (stand-in) kernel modules, from the stand-in ``/proc/modules``."""
        text = (Path(self.env["MODPROBE_PROCFS"]) / "modules").read_text()
        return [line.split()[0] for line in text.splitlines()]

    def gate(self, argument: str) -> Gate:
        """Make the next ``nvidia-smi`` call with ``argument`` wait at a gate (see :class:`Gate`)."""
        gate = Gate(self.root / f"gate{argument}", self.root / f"reached{argument}")
        wrapper = self.root / "bin" / "nvidia-smi"
        real = wrapper.read_text().split("\n", 1)[1]
        wrapper.write_text(
            "#!/bin/sh\n"
            f'case " $* " in *" {argument} "*) if [ -e {gate.closed} ]; then : > {gate.reached}; '
            f"while [ -e {gate.closed} ]; do sleep 0.05; done; fi;; esac\n" + real)
        gate.closed.touch()
        return gate


@dataclass
class Gate:
    """A point in the middle of an apply where the stand-in ``nvidia-smi`` waits while ``closed`` exists; it
    creates ``reached`` when a call gets there, so a test can interrupt the applier at that step."""

    closed: Path
    reached: Path

    def wait(self, proc: subprocess.Popen[str], timeout: float = 60.0) -> None:
        """Wait until the applier ``proc`` is held at the gate."""
        deadline = time.monotonic() + timeout
        while not self.reached.exists():
            assert proc.poll() is None, "the applier ended before reaching the gate"
            assert time.monotonic() < deadline, "the applier never reached the gate"
            time.sleep(0.05)

    def open(self) -> None:
        self.closed.unlink(missing_ok=True)


def make_node(tmp_path: Path) -> MigNode:
    """A node with two simulated H200s, driver 580.159.04 loaded, the applier installed, no services running."""
    sim_env = simtree.lay_out(tmp_path, MODULE_LINE)
    (tmp_path / "gpus.json").write_text(json.dumps({"gpus": H200X2}))
    write_bundle(str(tmp_path / "lib" / BUNDLE_NAME))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("nvidia-smi", "gpu-sim"):
        (bin_dir / name).write_text(f'#!/bin/sh\nexec {sys.executable} {SIM} {name} "$@"\n')
        (bin_dir / name).chmod(0o755)
    for name in ("systemctl", "modprobe", "crictl"):
        shutil.copy(STANDINS / name, bin_dir / name)
    kernel = tmp_path / "kernel"
    (kernel / "sys" / "module" / "nvidia" / "holders").mkdir(parents=True)
    (kernel / "proc").mkdir()
    (kernel / "proc" / "modules").write_text("nvidia 1000 0 - Live 0x0\n")
    env = dict(os.environ)
    env.update(
        PATH=f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}",
        **sim_env,
        SYSTEMCTL_STATE=str(tmp_path / "systemctl.json"),
        SYSTEMCTL_LOG=str(tmp_path / "systemctl.log"),
        SYSTEMCTL_HOLDERS="nvidia-dcgm.service nvidia-persistenced.service",
        CRICTL_STATE=str(tmp_path / "crictl.json"),
        CRICTL_LOG=str(tmp_path / "crictl.log"),
        MODPROBE_SYSFS=str(kernel / "sys"),
        MODPROBE_PROCFS=str(kernel / "proc"),
        GPU_PROVISION_MIG_RECORD=str(tmp_path / "var" / "mig-stopped.json"),
        GPU_PROVISION_MIG_LOCK=str(tmp_path / "run" / "mig-apply.lock"),
    )
    return MigNode(tmp_path, env)
