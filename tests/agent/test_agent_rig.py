"""``gpu-provision verify`` over real SSH against a rig node with two simulated H200s.

The node gets the stand-in NVIDIA driver's files (its nvidia-smi is the GPU simulator) unpacked and "loaded"
(device files created, /run/gpu-sim/version written in place of /proc/driver/nvidia/version); the rig supplies
the PCI view. There is no libcuda.so.1 on the node, so the CUDA checks are skips with that reason and every
other check runs. Faults are then injected on the node and must show up as the right failures.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gpu_provision.verify import collect
from gpu_provision.verify.expect import build_expectations
from gpu_provision.verify.report import schema_problems
from gpu_provision_rig import debs
from gpu_provision_rig.config import RigNode
from gpu_provision_rig.lifecycle import Rig, missing_requirements

pytestmark = [pytest.mark.rig, pytest.mark.slow]

# A node of this module's own, added to the shared rig and removed afterwards.
RIG_NODES = [RigNode("verify1", "127.0.10.161", gpu_model="H200", gpu_count=2)]
PACKAGES = ("nvidia-driver", "nvidia-kernel-open-dkms")
VERSION = "580.159.04-1"


@pytest.fixture(scope="module")
def rig():
    """The local rig (services started if needed) with this module's node; the node is removed afterwards."""
    missing = missing_requirements()
    if missing:
        pytest.skip(f"the rig cannot run here: missing {', '.join(missing)}")
    the_rig = Rig()
    the_rig.up(RIG_NODES)
    yield the_rig
    the_rig.remove([n.name for n in RIG_NODES])


def _ssh_opts(rig) -> list[str]:
    return ["-F", "/dev/null", "-i", str(rig.paths.client_key), "-o", f"UserKnownHostsFile={rig.paths.known_hosts}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes"]


def ssh(rig, node: RigNode, command: str) -> subprocess.CompletedProcess[str]:
    """Run ``command`` on ``node`` as root over real SSH (strict host key checking)."""
    return subprocess.run(["ssh", *_ssh_opts(rig), f"root@{node.ssh_address}", command], capture_output=True,
                          text=True, timeout=60)


@pytest.fixture(scope="module")
def gpu_node(rig, tmp_path_factory):
    """The rig node with the stand-in driver unpacked and loaded."""
    node = RIG_NODES[0]
    built = debs.build_all(tmp_path_factory.mktemp("debs"))
    files = [next(d.path for d in built if d.name == name and d.version == VERSION) for name in PACKAGES]
    # Unpacked rather than installed: the DKMS stand-in's dependencies are the driver stage's business.
    tree = tmp_path_factory.mktemp("driver-files")
    for deb in files:
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tree)], check=True, capture_output=True)
    archive = subprocess.run(["tar", "-C", str(tree), "-cf", "-", "."], check=True, capture_output=True).stdout
    copied = subprocess.run(["ssh", *_ssh_opts(rig), f"root@{node.ssh_address}",
                             "tar --no-overwrite-dir --keep-directory-symlink -xf - -C /"], input=archive, capture_output=True, timeout=60)
    assert copied.returncode == 0, copied.stderr
    done = ssh(rig, node, "/usr/lib/gpu-sim/nvidia-sim-load && nvidia-smi -pm 1")
    assert done.returncode == 0, done.stderr
    return node


def verify(rig, node: RigNode, tmp_path: Path, **kwargs) -> dict:
    expect = build_expectations("verify1", "H200", 2, driver_version="580.159.04", cuda_min="12.4",
                                device_permissions={"group": "root", "mode": "0666"},
                                paths={"driver_version_file": "/run/gpu-sim/version"}, **kwargs)
    (tmp_path / "expect.json").write_text(expect.to_json())
    data = {"ssh_user": "root", "ssh_key": str(rig.paths.client_key),
            "ssh_known_hosts_file": str(rig.paths.known_hosts), "ssh_strict_host_key_checking": "yes",
            "gpu_provision_verify_expect": str(tmp_path / "expect.json")}
    inventory = tmp_path / "inventory.py"
    inventory.write_text(f"hosts = [({node.ssh_address!r}, {data!r})]\n")
    (report,) = collect.run(str(inventory))
    assert schema_problems(report) == []
    return report


def checks_of(report: dict) -> dict[str, dict]:
    return {c["id"]: c for c in report["checks"]}


def test_healthy_node(rig, gpu_node, tmp_path):
    report = verify(rig, gpu_node, tmp_path)
    checks = checks_of(report)
    assert report["status"] == "pass", [c for c in report["checks"] if c["status"] == "fail"]
    assert report["host"]["os"].startswith("Debian GNU/Linux 12")
    assert checks["node.pci.gpus"]["measured"] == {"on_bus": 2, "bus_ids": ["0000:00:06.0", "0000:00:07.0"]}
    assert checks["gpu1.device_file"]["measured"]["path"] == "/dev/nvidia1"
    for cid in ("gpu0.cuda.vector_add", "gpu1.memory.bandwidth"):
        assert checks[cid]["status"] == "skip" and checks[cid]["reason"].startswith("libcuda.so.1 not loadable")


def test_injected_faults(rig, gpu_node, tmp_path):
    """A GPU lost by the driver, a MIG layout other than the file's, a device file with the wrong mode."""
    config = json.loads(ssh(rig, gpu_node, "cat /etc/gpu-sim/gpus.json").stdout)
    lost = {"gpus": config["gpus"][:1]}
    steps = [
        f"cp /etc/gpu-sim/gpus.json /tmp/gpus.json.orig && echo '{json.dumps(lost)}' > /etc/gpu-sim/gpus.json",
        "chmod 0600 /dev/nvidia0",
        "nvidia-smi -i 0 -mig 1 && nvidia-smi mig -i 0 -cgi 9,9 -C",
    ]
    for step in steps:
        done = ssh(rig, gpu_node, step)
        assert done.returncode == 0, (step, done.stdout, done.stderr)
    wanted = {0: [{"profile": "7g.141gb", "start": 0, "size": 8}]}
    report = verify(rig, gpu_node, tmp_path, mig=wanted)
    checks = checks_of(report)
    assert report["status"] == "fail"
    assert checks["node.gpu.count"]["measured"] == 1
    assert checks["node.pci.gpus"]["reason"] == "GPU(s) on the bus but not seen by the driver: 0000:00:07.0"
    assert checks["gpu0.device_file"]["reason"] == "/dev/nvidia0: mode 0600 (want 0666)"
    assert checks["gpu0.mig.layout"]["reason"] == ("MIG layout differs: missing 7g.141gb@0; unexpected "
                                                   "3g.71gb@0, 3g.71gb@4")
    ssh(rig, gpu_node, "mv /tmp/gpus.json.orig /etc/gpu-sim/gpus.json; chmod 0666 /dev/nvidia0")
