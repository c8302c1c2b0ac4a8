"""The host stack on a Debian 13 rig node: NVIDIA's debian13 repository path and trixie's own Docker.

The driver comes from the rig's stand-in for ``.../cuda/repos/debian13/x86_64/``, which serves the 590 branch:
NVIDIA's debian13 repository carries the driver under Debian 12's package names but was seen carrying branches
590 and later only (packages.json ``cuda-repo-branches``, rig/gpu_provision_rig/mirror.py). NVIDIA's branch
pinning package is installed first. Docker and
containerd are Debian 13's own (``docker.io`` 26.1, ``containerd`` 1.7) through the rig's apt proxy: the runtime
files the toolkit and the deploy write meet real packages of another generation than bookworm's. The node converges
as the sudo user, then a second run as root changes nothing, and drift finds nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nodehost
import pytest
import yaml
from clusterdirs import controller_dirs

from gpu_provision.stages.pipeline import HOST_STACK
from gpu_provision_rig.config import SUDO_USER
from gpu_provision_rig.mirror import build_mirror

pytestmark = [pytest.mark.rig, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "tests" / "rig" / "clusters" / "host-stack.yaml"
RIG_NODE_SHAPES = [("H200", 1, "trixie")]
DEPLOY = "from gpu_provision.stages.pipeline import HOST_STACK, gpu_node\n\ngpu_node(stages=HOST_STACK)\n"
HEADERS = "mkdir -p /lib/modules/$(uname -r)/build"  # the stand-in for kernel headers (see test_host_stack.py)
IMAGE = ("set -e; rm -rf /tmp/img; mkdir -p /tmp/img/bin; cp /bin/busybox /tmp/img/bin/busybox; "
         "tar -C /tmp/img -c . | docker import - rig/busybox:1")
HELD = ("nvidia-open", "nvidia-driver", "nvidia-kernel-open-dkms", "nvidia-container-toolkit",
        "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1")
node_host = nodehost.node_host  # the fixture, by name


@pytest.fixture(scope="module")
def node(rig, rig_nodes):  # type: ignore[no-untyped-def]
    """The module's one node, fresh, with the stand-in kernel headers, the rig's mirror up to date."""
    (found,) = rig_nodes
    assert found.suite == "trixie"
    build_mirror(rig.paths.mirror)  # a mirror served since before it had the debian13 path is brought up to date
    rig.reset_node(found.name)
    return found


def cluster_file(rig, node, user: str, folder: Path) -> Path:  # type: ignore[no-untyped-def]
    """host-stack.yaml's cluster settings with this one node, reached as ``user``."""
    doc = yaml.safe_load(CLUSTER.read_text())
    doc["cluster"]["ssh"].update(key=str(rig.paths.client_key), known_hosts=str(rig.paths.known_hosts), user=user)
    doc["cluster"]["controller_dirs"] = controller_dirs(rig)
    doc["nodes"] = [{"name": node.name, "address": node.ssh_address, "gpus": {"model": "H200", "count": 1},
                     "driver": {"branch": "590"}}]
    path = folder / f"cluster-{user}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def drift(path: Path) -> tuple[int, list[dict[str, object]]]:
    """``gpu-provision drift --json`` of the host-stack stages: exit status and the node's differences."""
    argv = [sys.executable, "-m", "gpu_provision.cli", "drift", "--cluster", str(path), "--json",
            *(arg for stage in HOST_STACK for arg in ("--stage", stage)), str(REPO / "inventory.py")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO)
    report = json.loads(proc.stdout)
    return proc.returncode, report["nodes"][0]["differences"]


def test_debian13_converges_from_its_own_cuda_path_as_the_sudo_user_and_root_changes_nothing(
        rig, node, pyinfra, ssh, node_host, monkeypatch, tmp_path):  # type: ignore[no-untyped-def]
    assert ssh(node, HEADERS).returncode == 0
    deploy = pyinfra.deploy(DEPLOY, name="host_stack.py")
    as_sudo = cluster_file(rig, node, SUDO_USER, tmp_path)
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(as_sudo))
    first = pyinfra.run(REPO / "inventory.py", deploy, timeout=900)
    assert first.returncode == 0, first.output[-6000:]

    host = node_host(node)
    assert host.file("/etc/os-release").content_string.count('VERSION_CODENAME=trixie') == 1
    sources = host.file("/etc/apt/sources.list.d/cuda.sources").content_string
    assert "URIs: http://10.77.0.1:8080/cuda/debian13/x86_64/" in sources, sources
    assert host.package("nvidia-driver-pinning-590").is_installed
    assert "Pin: version 590.*" in host.file("/etc/apt/preferences.d/nvidia-driver-pin").content_string
    assert host.package("nvidia-driver").version == "590.48.01-1"
    assert host.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader") == "590.48.01"
    assert set(HELD) <= set(host.check_output("apt-mark showhold").split())
    # Debian 13's own Docker, nvidia its default runtime.
    assert host.package("docker.io").version.startswith("26.")
    daemon = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert daemon["default-runtime"] == "nvidia" and daemon["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    install = ssh(node, "DEBIAN_FRONTEND=noninteractive apt-get install -y -q busybox-static && " + IMAGE)
    assert install.returncode == 0, install.stderr[-2000:]
    run = ssh(node, "docker run --rm -e NVIDIA_VISIBLE_DEVICES=0 rig/busybox:1 /bin/busybox ls /dev")
    assert run.returncode == 0, run.stderr
    assert "nvidia0" in run.stdout.split() and "nvidiactl" in run.stdout.split()

    as_root = cluster_file(rig, node, "root", tmp_path)
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(as_root))
    second = pyinfra.run(REPO / "inventory.py", deploy, timeout=900)
    assert second.returncode == 0, second.output[-6000:]
    assert (second.totals()["success"], second.totals()["error"]) == (0, 0), second.output[-6000:]
    assert drift(as_root) == (0, [])


def test_a_version_without_a_pinning_package_is_refused_by_preflight_and_nothing_changes(
        rig, node, pyinfra, ssh, monkeypatch, tmp_path):  # type: ignore[no-untyped-def]
    """Once the node's index knows NVIDIA's repository (the test above configured it), a driver version whose pinning
    package the repository lacks (580.95.05: debian13's repository was seen carrying branches 590 and later) stops at
    preflight with the names it has, after the warning about the branch; no package changes."""
    before = ssh(node, "dpkg-query -W -f '${Package} ${Version}\\n' | sort").stdout
    doc = yaml.safe_load(cluster_file(rig, node, "root", tmp_path).read_text())
    doc["nodes"][0]["driver"] = {"version": "580.95.05"}
    path = tmp_path / "cluster-old-version.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(path))
    run = pyinfra.run(REPO / "inventory.py", pyinfra.deploy(DEPLOY, name="host_stack.py"), timeout=900)
    assert run.returncode != 0
    assert ("NVIDIA's CUDA repository for debian13/x86_64 was seen to carry driver branches from 590 on, not 580"
            in run.output), run.output[-6000:]
    assert ("NVIDIA's CUDA repository, as this node's package index knows it, has no "
            "nvidia-driver-pinning-580.95.05 (it has nvidia-driver-pinning-590, nvidia-driver-pinning-590.48.01)"
            in run.output), run.output[-6000:]
    assert ssh(node, "dpkg-query -W -f '${Package} ${Version}\\n' | sort").stdout == before
