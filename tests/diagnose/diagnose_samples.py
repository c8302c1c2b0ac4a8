"""The healthy bundle: the real H200 outputs in ``tests/fixtures`` and a converged node's other items."""

from __future__ import annotations

import json
from pathlib import Path

from gpu_provision.doctor import DoctorExpectations

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

#: The device files as the H200 node had them (tests/fixtures/h200/README.md): the driver's default 0666 root:root.
H200_DEVICES = {path: {"mode": "0666", "uid": 0, "gid": 0, "group": "root"}
                for path in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")}


def healthy_files(host: str = "h200") -> dict[str, str]:
    """A bundle's items as the real H200 host printed them, with the node's other items as a converged node has
    them (docker with the nvidia runtime, the device plugin registered, nothing pending)."""
    base = FIXTURES / host
    files = {
        "nvidia-smi/q.xml": (base / "nvsmi_q.xml").read_text(),
        "nvidia-smi/nvidia-smi.txt": (base / "nvidia-smi.txt").read_text(),
        "files/proc/modules": "nvidia_uvm 1941504 0 - Live 0x0\nnvidia 11567104 2 nvidia_uvm, Live 0x0\n",
        "versions/libnvidia-ml.txt": "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.159.04",
        "system/devices.json": json.dumps(H200_DEVICES),
        "system/users.json": json.dumps({"alice": ["alice", "video"]}),
        "runtime/images.json": json.dumps({"nvidia/cuda:12.8.1-base-ubuntu24.04": {
            "runtime": "docker", "env": ["CUDA_VERSION=12.8.1", "NVIDIA_REQUIRE_CUDA=cuda>=12.8 brand=tesla"]}}),
        "files/etc/docker/daemon.json": json.dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}),
        "listings/var/lib/kubelet/device-plugins.txt": "kubelet.sock\nnvidia-gpu.sock",
        "probe.json": json.dumps({"system": {"kernel": "6.8.0-79-generic", "kernel_pending": "6.8.0-79-generic"}}),
        "kernel/nvidia.log": "2026-11-30T10:00:00+0000 node kernel: NVRM: loading NVIDIA UNIX Open Kernel Module",
    }
    version = base / "proc_driver_nvidia_version.txt"
    files["files/proc/driver/nvidia/version"] = (version if version.exists() else
                                                 FIXTURES / "h200" / "proc_driver_nvidia_version.txt").read_text()
    return files


EXPECT = DoctorExpectations(users=("alice",), images={"nvidia/cuda:12.8.1-base-ubuntu24.04": None}, runtime="docker",
                      kubernetes=True)


