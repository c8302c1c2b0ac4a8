"""``vagrant up --provider=libvirt`` of the project's own Vagrantfile on this machine, then the README's Vagrant
path: ``vagrant ssh-config`` → ``gpu-provision vagrant-cluster`` → plain pyinfra, and ``vagrant reload``.

``gpu-provision-rig libvirt up`` (:mod:`gpu_provision_rig.libvirt`) starts libvirt, an isolated network (no NAT,
no forwarding) and the loopback forwarder ``127.0.13.1:22``; the Vagrantfile takes its settings from the export
lines it prints. Vagrant itself replaces the box's insecure key; everything after that logs in with the key
Vagrant made, on the loopback address only. The VM has no GPU, so the file gives it none: a converge brings it
Docker from Debian's archive (through the rig's apt proxy), on the VM's own kernel, as its sudo user and as root.
About six minutes under QEMU's emulation, the box cached.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_provision_rig.box import DEFAULT_SUITE, ensure_box
from gpu_provision_rig.config import APT_PROXY_PORT, BRIDGE_ADDRESS
from gpu_provision_rig.libvirt import LibvirtRig, VagrantNode, VagrantProject

pytestmark = [pytest.mark.rig, pytest.mark.slow, pytest.mark.vm]

REPO = Path(__file__).resolve().parents[2]
#: The rig itself only for its apt proxy: one plain node brings it up.
RIG_NODE_SHAPES = [(None, 0)]
NODE = VagrantNode(1)
BOOT_ID = "cat /proc/sys/kernel/random/boot_id"


class Project(VagrantProject):
    """The test's project: a copy of the project's Vagrantfile, its one VM, the kernel of the box it boots."""

    def __init__(self, folder: Path, env: dict[str, str], kernel: str):
        super().__init__(folder, env)
        self.kernel = kernel

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        """``command`` in the VM."""
        return self.ssh(NODE, command)


@pytest.fixture(scope="module")
def project(rig, rig_nodes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:  # type: ignore[no-untyped-def]
    """``libvirt up`` for one node, ``vagrant up --provider=libvirt`` in a copy of the project's Vagrantfile;
    afterwards ``vagrant destroy -f`` and ``libvirt down``."""
    libvirt = LibvirtRig(rig.paths)
    settings = libvirt.up(1, DEFAULT_SUITE)
    folder = tmp_path_factory.mktemp("vagrant-project")
    shutil.copy(REPO / "Vagrantfile", folder / "Vagrantfile")
    env = {**os.environ, **settings, "GP_NODES": "1", "VAGRANT_CHECKPOINT_DISABLE": "1"}
    machine = Project(folder, env, ensure_box(rig.paths.cache, DEFAULT_SUITE).kernel)
    try:
        up = machine.vagrant("up", "--provider=libvirt")
        assert up.returncode == 0, up.stdout[-4000:] + up.stderr[-4000:]
        yield machine
    finally:
        machine.vagrant("destroy", "-f")
        libvirt.down()


def test_vagrant_up_boots_the_box_and_reaches_it_only_on_loopback(project: Project) -> None:
    """The Vagrantfile's node runs the box's own kernel; Vagrant reaches it on 127.0.13.1:22; the guest's only
    route beyond its own network is the rig's subnet, where the apt proxy answers and a rig node does not
    (the host forwards nothing)."""
    config = project.vagrant("ssh-config").stdout
    assert re.search(r"HostName 127\.0\.13\.1\n\s+User vagrant\n\s+Port 22\n", config), config
    ran = project.run(f"uname -r; ip -4 route | sort; "
                      f"for a in {BRIDGE_ADDRESS}/{APT_PROXY_PORT} 10.77.0.11/22 192.0.2.1/80; do "
                      f"timeout 5 bash -c \"echo > /dev/tcp/$a\" 2>/dev/null && echo open || echo closed; done")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0] == project.kernel
    routes = [line.split()[0] for line in lines[1:-3]]
    assert sorted(routes) == ["10.77.0.0/24", "10.77.1.0/24", "10.77.1.1"], lines
    assert lines[-3:] == ["open", "closed", "closed"], lines


def test_the_cluster_file_from_vagrant_converges_the_vm_as_its_sudo_user_then_root(
        project: Project, pyinfra, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``vagrant ssh-config`` → ``gpu-provision vagrant-cluster`` → ``pyinfra inventory.py deploys/gpu_node.py``:
    Docker from Debian's archive on the VM's kernel, running with the file's settings; the same run as root (its
    key put in place through sudo) changes nothing."""
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(project.cluster_file(tmp_path / "cluster-vagrant.yaml", "vagrant")))
    first = pyinfra.run(REPO / "inventory.py", REPO / "deploys/gpu_node.py", timeout=1800)
    assert first.returncode == 0, first.output[-4000:]
    assert first.totals()["success"] >= 3, first.output[-4000:]  # proxy, docker packages, configuration, service
    ran = project.run("sudo -n docker info --format '{{.CgroupDriver}} {{.KernelVersion}}'; uname -r; "
                      "dpkg-query -W -f '${Status}\\n' docker.io")
    driver, kernel, running_kernel, *status = ran.stdout.split()
    assert (driver, kernel, " ".join(status)) == ("systemd", running_kernel, "install ok installed"), ran.stdout
    assert project.run("sudo -n install -d -m 0700 /root/.ssh && "
                       "sudo -n cp /home/vagrant/.ssh/authorized_keys /root/.ssh/").returncode == 0
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(project.cluster_file(tmp_path / "cluster-root.yaml", "root")))
    again = pyinfra.run(REPO / "inventory.py", REPO / "deploys/gpu_node.py", timeout=900)
    assert again.returncode == 0, again.output[-4000:]
    assert again.totals()["success"] == 0 and again.totals()["no_change"] > 0, again.output[-4000:]


def test_vagrant_reload_is_a_real_reboot_and_the_node_stays_converged(project: Project) -> None:
    """``vagrant reload``: a new boot (boot id) of the same disk; Docker, enabled by the converge, runs again."""
    before = project.run(BOOT_ID).stdout.strip()
    reloaded = project.vagrant("reload")
    assert reloaded.returncode == 0, reloaded.stdout[-3000:] + reloaded.stderr[-3000:]
    # Vagrant calls the machine ready when sshd answers; the boot may still be starting units.
    after = project.run(f"timeout 240 systemctl is-system-running --wait >/dev/null; {BOOT_ID}; "
                        "systemctl is-active docker")
    boot_id, docker = after.stdout.split()
    assert boot_id != before and docker == "active", after.stdout + after.stderr
