"""MIG layouts on a rig node with two simulated H200s, through real pyinfra runs of preflight, driver and mig.

Stand-ins (rig/gpu_provision_rig/standins/): the NVIDIA driver packages from the rig's signed mirror, whose
``nvidia-smi`` is the GPU simulator; ``/lib/modules/<kernel>/build`` stands in for kernel headers. Layout A -> B -> A,
a second run that changes nothing, refusal while a process holds a GPU, and the layout back after the node reboots
(``gpu-provision-mig.service``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from clusterdirs import controller_dirs

from gpu_provision_rig.config import RigNode
from gpu_provision_rig.node import leader_pid

pytestmark = [pytest.mark.rig, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
RIG_NODE_SHAPES = [("H200", 2)]
DEPLOY = 'from gpu_provision.stages.pipeline import gpu_node\n\ngpu_node(stages=("preflight", "driver", "mig"))\n'
HEADERS = "mkdir -p /lib/modules/$(uname -r)/build"
A = {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}
B = {"3g.71gb": 2}
A_PLACED = ["2g.35gb@0:2", "1g.18gb@2:1", "1g.18gb@3:1", "3g.71gb@4:4"]
B_PLACED = ["3g.71gb@0:4", "3g.71gb@4:4"]


def cluster_doc(rig, node: RigNode, layout: dict, gpu1: dict | None = None) -> dict:  # type: ignore[no-untyped-def]
    mig: dict = {"layout": layout}
    if gpu1 is not None:
        mig["gpus"] = {"1": {"layout": gpu1}}
    return {
        "version": "v1",
        "cluster": {
            "name": "rig-mig",
            "kubernetes": {"enabled": False},
            "mirrors": {
                "cuda": {"url": "http://10.77.0.1:8080/cuda/{distro}/{cuda_arch}/",
                         "key_url": "http://10.77.0.1:8080/cuda/{distro}/{cuda_arch}/gpu-provision-rig.pub"},
                "package_proxy": "http://10.77.0.1:3142/",
            },
            "ssh": {"user": "root", "key": str(rig.paths.client_key), "known_hosts": str(rig.paths.known_hosts)},
            "controller_dirs": controller_dirs(rig),
        },
        "nodes": [{"name": node.name, "address": node.ssh_address, "gpus": {"model": "H200", "count": 2},
                   "driver": {"branch": "580", "reboot": "never"}, "mig": mig}],
    }


@pytest.fixture(scope="module")
def node(rig, rig_nodes) -> RigNode:  # type: ignore[no-untyped-def]
    """The module's node with two simulated H200s, fresh once per module."""
    rig.reset_node(rig_nodes[0].name)
    return rig_nodes[0]


@pytest.fixture
def deploy(rig, node, pyinfra, monkeypatch, tmp_path):  # type: ignore[no-untyped-def]
    """Runs the deploy with a cluster file giving GPU 0 ``layout`` (GPU 1: 7g.141gb)."""
    path = pyinfra.deploy(DEPLOY, name="mig_deploy.py")

    def run(layout: dict):  # type: ignore[no-untyped-def]
        cluster = tmp_path / "cluster.yaml"
        cluster.write_text(yaml.safe_dump(cluster_doc(rig, node, layout, {"7g.141gb": 1}), sort_keys=False))
        monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(cluster))
        return pyinfra.run(REPO / "inventory.py", path, timeout=900)

    return run


def placed(ssh, node: RigNode, gpu: int = 0) -> list[str]:  # type: ignore[no-untyped-def]
    """``profile@start:size`` of the node's GPU instances on ``gpu``, from its ``nvidia-smi mig -lgi``."""
    out = ssh(node, f"nvidia-smi mig -lgi -i {gpu}").stdout
    rows = []
    for line in out.splitlines():
        parts = line.strip("| ").split()
        if len(parts) == 6 and parts[1] == "MIG":
            rows.append((int(parts[5].split(":")[0]), f"{parts[2]}@{parts[5]}"))
    return [r for _, r in sorted(rows)]


def test_layout_a_then_no_change(deploy, ssh, node):  # type: ignore[no-untyped-def]
    assert ssh(node, HEADERS).returncode == 0
    first = deploy(A)
    assert first.returncode == 0, first.output[-6000:]
    assert placed(ssh, node, 0) == A_PLACED
    assert placed(ssh, node, 1) == ["7g.141gb@0:8"]
    assert ssh(node, "systemctl is-enabled gpu-provision-mig.service").stdout.strip() == "enabled"
    layout = yaml.safe_load(ssh(node, "cat /etc/gpu-provision/mig-layout.yaml").stdout)
    assert layout["version"] == "v1" and list(layout["mig-configs"]) == [node.name]
    second = deploy(A)
    assert second.returncode == 0, second.output[-6000:]
    assert second.totals()["success"] == 0, second.output[-6000:]


def test_layout_b_then_a_again(deploy, ssh, node):  # type: ignore[no-untyped-def]
    to_b = deploy(B)
    assert to_b.returncode == 0, to_b.output[-6000:]
    assert placed(ssh, node, 0) == B_PLACED and placed(ssh, node, 1) == ["7g.141gb@0:8"]
    back = deploy(A)
    assert back.returncode == 0, back.output[-6000:]
    assert placed(ssh, node, 0) == A_PLACED


def test_drift_names_the_gpu_changed_by_hand(rig, deploy, ssh, node, tmp_path):  # type: ignore[no-untyped-def]
    assert deploy(A).returncode == 0
    gi = ssh(node, "nvidia-smi mig -lgi -i 0 | awk '/1g.18gb/ {print $6; exit}'").stdout.strip()
    assert ssh(node, f"nvidia-smi mig -i 0 -gi {gi} -dci && nvidia-smi mig -i 0 -gi {gi} -dgi").returncode == 0
    cluster = tmp_path / "drift-cluster.yaml"
    cluster.write_text(yaml.safe_dump(cluster_doc(rig, node, A, {"7g.141gb": 1}), sort_keys=False))
    drift = subprocess.run([sys.executable, "-m", "gpu_provision.cli", "drift", str(REPO / "inventory.py"),
                            "--cluster", str(cluster), "--stage", "mig", "--json"],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert drift.returncode == 1, drift.stdout + drift.stderr
    assert '"mig-layout"' in drift.stdout and "GPU 0" in drift.stdout, drift.stdout
    assert "1g.18gb@2:1, 3g.71gb@4:4" in drift.stdout or "1g.18gb@3:1, 3g.71gb@4:4" in drift.stdout, drift.stdout
    repaired = deploy(A)
    assert repaired.returncode == 0, repaired.output[-6000:]
    assert placed(ssh, node, 0) == A_PLACED
    again = subprocess.run([sys.executable, "-m", "gpu_provision.cli", "drift", str(REPO / "inventory.py"),
                            "--cluster", str(cluster), "--stage", "mig", "--json"],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(again.stdout)


def test_busy_gpu_refused_then_applied(deploy, ssh, node):  # type: ignore[no-untyped-def]
    hold = ssh(node, "nohup gpu-sim hold --gpu 0 --gi 3 -- sleep 600 >/dev/null 2>&1 & sleep 1; "
                     "nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader")
    assert "sleep" in hold.stdout, hold.stdout + hold.stderr
    pid = hold.stdout.split(",")[0].strip()
    try:
        refused = deploy(B)
        assert refused.returncode != 0
        assert f"refused: GPU 0 is in use by {pid} (sleep)" in refused.output, refused.output[-6000:]
        assert placed(ssh, node, 0) == A_PLACED
    finally:
        ssh(node, f"kill {pid}")
    applied = deploy(B)
    assert applied.returncode == 0, applied.output[-6000:]
    assert placed(ssh, node, 0) == B_PLACED


def reboot(rig, ssh, node: RigNode) -> None:  # type: ignore[no-untyped-def]
    """Reboot a rig node and return once its systemd has finished booting (a new leader process, sshd answering)."""
    before = leader_pid(rig.layout(node.name))
    ssh(node, "systemctl reboot")
    deadline = time.monotonic() + 120
    while leader_pid(rig.layout(node.name)) in (before, None) and time.monotonic() < deadline:
        time.sleep(0.2)
    rig.wait_ssh([node.name])
    ssh(node, "systemctl is-system-running --wait")


def test_layout_back_after_reboot(rig, deploy, ssh, node):  # type: ignore[no-untyped-def]
    assert deploy(A).returncode == 0
    reboot(rig, ssh, node)
    status = ssh(node, "systemctl show -p ActiveState,Result gpu-provision-mig.service").stdout
    assert "ActiveState=active" in status and "Result=success" in status, status
    assert ssh(node, "nvidia-smi --query-gpu=mig.mode.current --format=csv,noheader").stdout.split() == [
        "Enabled", "Enabled"]
    assert placed(ssh, node, 0) == A_PLACED
    assert placed(ssh, node, 1) == ["7g.141gb@0:8"]
