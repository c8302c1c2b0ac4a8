"""Integration on a real rig node: nvidia-open from the signed mirror over HTTP, then nvidia-smi there."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import pytest
import tomlkit

from gpu_provision_rig.config import RigNode
from gpu_provision_rig.lifecycle import Rig, missing_requirements
from gpu_provision_rig.mirror import build_mirror

pytestmark = [pytest.mark.rig, pytest.mark.slow]

NODE = RigNode("rigstandin1", "127.0.10.77", gpu_model="H200", gpu_count=1)
MIRROR_URL = "http://10.77.0.1:8080"
APT = ("apt-get -q -o Dir::Etc::sourcelist=/etc/apt/sources.list.d/cuda.list -o Dir::Etc::sourceparts=/nonexistent")


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[Rig, RigNode]]:
    """One node with one simulated H200, removed afterwards (the rig itself only if nothing else runs)."""
    missing = missing_requirements()
    if missing:
        pytest.skip(f"the rig cannot run here: missing {', '.join(missing)}")
    rig = Rig()
    rig.remove([NODE.name])
    try:
        rig.up([NODE])
        # The server may have been started by an earlier run: bring the files it serves up to date.
        build_mirror(rig.paths.mirror)
        yield rig, NODE
    finally:
        rig.remove([NODE.name])
        if not rig.nodes():
            rig.down()


def ssh(rig: Rig, node: RigNode, command: str) -> subprocess.CompletedProcess[str]:
    argv = ["ssh", "-F", "/dev/null", "-i", str(rig.paths.client_key),
            "-o", f"UserKnownHostsFile={rig.paths.known_hosts}", "-o", "StrictHostKeyChecking=yes",
            "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=10",
            f"root@{node.ssh_address}", command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def test_install_nvidia_open_from_the_mirror_and_run_nvidia_smi(node: tuple[Rig, RigNode]) -> None:
    rig, n = node
    setup = (
        "set -e; mkdir -p /etc/apt/keyrings; "
        "python3 -c \"import urllib.request; open('/etc/apt/keyrings/gpu-provision-rig.asc', 'wb')"
        f".write(urllib.request.urlopen('{MIRROR_URL}/keys/gpu-provision-rig.asc').read())\"; "
        "echo 'deb [signed-by=/etc/apt/keyrings/gpu-provision-rig.asc] "
        f"{MIRROR_URL}/cuda/debian12/x86_64/ /' > /etc/apt/sources.list.d/cuda.list; "
        f"{APT} update && DEBIAN_FRONTEND=noninteractive {APT} install -y nvidia-open"
    )
    installed = ssh(rig, n, setup)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    assert "NO_PUBKEY" not in installed.stdout + installed.stderr
    units = ssh(rig, n, "systemctl is-active nvidia-sim-load.service nvidia-persistenced.service")
    assert units.stdout.split() == ["active", "active"], units.stdout + units.stderr
    listing = ssh(rig, n, "nvidia-smi -L")
    assert listing.returncode == 0, listing.stdout + listing.stderr
    gpus = json.loads(ssh(rig, n, "cat /etc/gpu-sim/gpus.json").stdout)["gpus"]
    assert listing.stdout == f"GPU 0: NVIDIA H200 (UUID: {gpus[0]['uuid']})\n"
    query = ssh(rig, n, "nvidia-smi --query-gpu=driver_version,persistence_mode,mig.mode.current --format=csv,noheader")
    assert query.stdout == "580.159.04, Enabled, Disabled\n"
    dev = ssh(rig, n, "stat -c '%F %t:%T %a' /dev/nvidia0 /dev/nvidiactl")
    assert dev.stdout.splitlines() == ["character special file c3:0 666", "character special file c3:ff 666"], (
        dev.stdout + dev.stderr)


def test_docker_runs_a_container_with_the_nvidia_runtime(node: tuple[Rig, RigNode]) -> None:
    """nvidia-ctk configures Docker; `docker run --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=..` sees the GPU files."""
    rig, n = node
    setup = (
        "set -e; "
        "echo 'deb [signed-by=/etc/apt/keyrings/gpu-provision-rig.asc] "
        f"{MIRROR_URL}/libnvidia-container/stable/deb/amd64/ /' > /etc/apt/sources.list.d/toolkit.list; "
        "export DEBIAN_FRONTEND=noninteractive; apt-get -q update && "
        "apt-get -q install -y --no-install-recommends docker.io busybox-static nvidia-container-toolkit && "
        "nvidia-ctk runtime configure --runtime=docker && systemctl restart docker && "
        "rm -rf /tmp/img && mkdir -p /tmp/img/bin && cp /bin/busybox /tmp/img/bin/ && "
        "for c in sh ls stat cat; do ln -sf busybox /tmp/img/bin/$c; done && "
        "tar -C /tmp/img -c . | docker import - local/busybox >/dev/null"
    )
    prepared = ssh(rig, n, setup)
    assert prepared.returncode == 0, prepared.stdout[-3000:] + prepared.stderr[-3000:]
    daemon = json.loads(ssh(rig, n, "cat /etc/docker/daemon.json").stdout)
    assert daemon["runtimes"]["nvidia"] == {"args": [], "path": "nvidia-container-runtime"}
    run = ssh(rig, n, "docker run --rm --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=all local/busybox "
                      "ls /dev/nvidia0 /dev/nvidiactl /dev/nvidia-uvm")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.split() == ["/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidiactl"]
    plain = ssh(rig, n, "docker run --rm local/busybox ls /dev/nvidia0")
    assert plain.returncode != 0, "without the runtime and variable the container sees no GPU"
    opened = ssh(rig, n, "docker run --rm --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=0 local/busybox "
                         "cat /dev/nvidia0")
    # The cgroup lets the open through (EPERM otherwise); with no driver behind 195:0 the kernel says ENXIO.
    assert opened.returncode != 0 and "No such device or address" in opened.stderr, opened.stderr


def test_reboot_reloads_the_module_and_drops_hopper_mig_state(node: tuple[Rig, RigNode]) -> None:
    rig, n = node
    made = ssh(rig, n, "nvidia-smi -mig 1 && nvidia-smi mig -cgi 9,9 -C && nvidia-smi mig -lgi")
    assert made.returncode == 0 and made.stdout.count("MIG 3g.71gb") == 6, made.stdout + made.stderr
    before = ssh(rig, n, "cat /run/gpu-sim/boot-token").stdout
    assert before.strip()
    ssh(rig, n, "systemctl reboot")
    for _ in range(120):
        state = ssh(rig, n, "systemctl is-system-running --wait; cat /run/gpu-sim/boot-token 2>/dev/null")
        if state.stdout.split()[:1] in (["running"], ["degraded"]) and before not in state.stdout:
            break
        time.sleep(1)
    else:
        raise AssertionError("the node did not come back from the reboot")
    query = ssh(rig, n, "nvidia-smi --query-gpu=mig.mode.current,mig.mode.pending,persistence_mode --format=csv,noheader")
    assert query.stdout == "Disabled, Disabled, Enabled\n", query.stdout + query.stderr
    assert ssh(rig, n, "nvidia-smi mig -lgi").stdout == "No MIG-enabled devices found.\n"
    assert ssh(rig, n, "systemctl is-active nvidia-sim-load.service").stdout.strip() == "active"


def test_containerd_reads_the_dropin_and_keeps_its_own_cri_settings(node: tuple[Rig, RigNode]) -> None:
    """Real containerd (Debian's, pulled in by docker.io above) loads the drop-in nvidia-ctk wrote."""
    rig, n = node
    config = (
        "version = 2\\n\\n"
        '[plugins."io.containerd.grpc.v1.cri"]\\n  sandbox_image = "registry.k8s.io/pause:3.10"\\n\\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\\n  runtime_type = "io.containerd.runc.v2"\\n\\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\\n  SystemdCgroup = true\\n'
    )
    done = ssh(rig, n, f"printf '{config}' > /etc/containerd/config.toml && "
                       "nvidia-ctk runtime configure --runtime=containerd --set-as-default && "
                       "systemctl restart containerd && containerd config dump")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    dump = tomlkit.loads(done.stdout).unwrap()
    cri = dump["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "registry.k8s.io/pause:3.10"
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    nvidia = cri["containerd"]["runtimes"]["nvidia"]
    assert nvidia["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert nvidia["options"]["SystemdCgroup"] is True
