"""The VM tier: a Vagrant box built here from Debian's archive, booted under QEMU with its own (real) kernel, and the
product run against it through plain pyinfra and the fleet commands, as the box's sudo user and as root.

What a VM has that an nspawn node has not: its own kernel, loadable modules, an initramfs, a boot loader and real
reboots. What it lacks here: a GPU (none can be passed through on this machine), so the product must say exactly
that and nothing else. The boxes (:mod:`gpu_provision_rig.box`, Debian 12 and 13; every test runs on both) are cached between runs; a
first build takes about a minute, a boot under TCG about half a minute. Network: the VM reaches only the rig's apt proxy and mirror
(:mod:`gpu_provision_rig.vm`); the controller reaches it only on 127.0.12.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import vmguest
from vmguest import IN_INITRAMFS, cluster_doc, enable_root_login, reboot, vm_ssh, write_cluster

from gpu_provision_rig.box import Box
from gpu_provision_rig.config import APT_PROXY_PORT, BRIDGE_ADDRESS
from gpu_provision_rig.vm import Vm, VmSpec

pytestmark = [pytest.mark.rig, pytest.mark.slow, pytest.mark.vm]

REPO = Path(__file__).resolve().parents[2]
#: The rig itself only for its apt proxy and mirror: one plain node brings them up.
RIG_NODE_SHAPES = [(None, 0)]
VM = VmSpec("vmtest1", "127.0.12.1")
STAGES_PREFLIGHT = "from gpu_provision.stages.pipeline import gpu_node\n\ngpu_node(stages=('preflight',))\n"
CHANGED_FILES = "sudo -n find /etc /usr /boot -newer /etc/hostname 2>/dev/null | sort"
NO_GPU = "0 NVIDIA GPU(s) on the PCI bus, the file expects 1 H200"


box, vm, login = vmguest.box, vmguest.vm, vmguest.login  # the fixtures, by name


def cluster_file(rig, folder: Path, login: dict[str, Any], user: str) -> Path:  # type: ignore[no-untyped-def]
    """The VM as a node with one H200 (which it has not), reached as ``user``."""
    return write_cluster(cluster_doc(rig, login, user, VM.name), folder, user)


def test_the_box_follows_vagrants_conventions(box: Box, tmp_path: Path) -> None:
    """vagrant-libvirt's box format (metadata.json: provider, format, virtual_size), and Vagrant itself adds it."""
    meta = box.metadata
    assert (meta["provider"], meta["format"]) == ("libvirt", "qcow2") and isinstance(meta["virtual_size"], int)
    with tarfile.open(box.box_file) as tar:
        assert sorted(tar.getnames()) == ["Vagrantfile", "box.img", "metadata.json"]
    info = subprocess.run(["qemu-img", "info", "--output=json", str(box.image)], capture_output=True, text=True,
                          check=True)
    image = json.loads(info.stdout)
    assert image["format"] == "qcow2" and image["virtual-size"] == meta["virtual_size"] * 1024 ** 3
    env = {**os.environ, "VAGRANT_HOME": str(tmp_path / "vagrant.d"), "VAGRANT_CHECKPOINT_DISABLE": "1"}
    added = subprocess.run(["vagrant", "box", "add", "--name", f"gpu-provision/{box.name}", str(box.box_file)],
                           capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert added.returncode == 0, added.stdout + added.stderr
    listed = subprocess.run(["vagrant", "box", "list"], capture_output=True, text=True, env=env, timeout=120,
                            cwd=tmp_path)
    assert f"gpu-provision/{box.name} (libvirt, 0)" in listed.stdout, listed.stdout + listed.stderr


def test_the_vm_runs_the_boxs_own_kernel_and_loads_modules(vm: Vm, box: Box, login: dict[str, Any]) -> None:
    """Its own kernel (not the host's, as nspawn nodes have), real module loading, the vagrant login with
    passwordless sudo, host keys of its own."""
    ran = vm_ssh(login, "uname -r; sudo -n modprobe dummy && lsmod | awk '$1 == \"dummy\"' | wc -l; "
                        "sudo -n cat /etc/machine-id; systemctl is-system-running")
    assert ran.returncode == 0, ran.stderr
    kernel, loaded, machine_id, system = ran.stdout.split()
    assert kernel == box.kernel and kernel != os.uname().release
    assert loaded == "1" and len(machine_id) == 32 and system == "running"


def test_the_vm_reaches_the_rigs_apt_proxy_and_nothing_else(vm: Vm, login: dict[str, Any]) -> None:
    """apt through the rig's proxy works; the network's gateway (the host, through QEMU) refuses connections."""
    ran = vm_ssh(login, f"sudo -n apt-get -q -o Acquire::http::Proxy=http://{BRIDGE_ADDRESS}:{APT_PROXY_PORT}/ "
                        "update >/dev/null && echo updated; timeout 10 bash -c 'echo > /dev/tcp/10.77.0.2/22' "
                        "2>/dev/null && echo gateway-open || echo gateway-closed")
    assert ran.stdout.split() == ["updated", "gateway-closed"], ran.stdout + ran.stderr


@pytest.mark.parametrize("user", ["vagrant", "root"])
def test_preflight_says_no_gpu_is_on_the_pci_bus_and_changes_nothing(  # type: ignore[no-untyped-def]
        rig, vm: Vm, login: dict[str, Any], user: str, pyinfra, tmp_path: Path, monkeypatch) -> None:
    """On a real kernel without a GPU, preflight stops the node with the PCI bus's count and the file's, and writes
    nothing; as the box's sudo user and as root (whose login the test sets up through sudo)."""
    if user == "root":
        enable_root_login(login)
    before = vm_ssh(login, CHANGED_FILES).stdout.split()
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(cluster_file(rig, tmp_path, login, user)))
    result = pyinfra.run(REPO / "inventory.py", pyinfra.deploy(STAGES_PREFLIGHT), timeout=900)
    assert result.returncode != 0, result.output[-4000:]
    assert NO_GPU in result.output, result.output[-4000:]
    after = vm_ssh(login, CHANGED_FILES).stdout.split()
    assert after == before, sorted(set(after) ^ set(before))


def test_verify_says_no_gpu_is_on_the_pci_bus(rig, vm: Vm, box: Box, login: dict[str, Any],  # type: ignore[no-untyped-def]
                                              tmp_path: Path) -> None:
    """``gpu-provision verify`` on the VM (no driver deployed yet): the PCI check counts no GPU on the bus, the driver
    checks say the module is not loaded, and no check errors; the report names the VM's own kernel."""
    path = cluster_file(rig, tmp_path, login, "vagrant")
    env = {**os.environ, "GPU_PROVISION_CLUSTER": str(path)}
    proc = subprocess.run([sys.executable, "-m", "gpu_provision.cli", "verify", "--json", str(REPO / "inventory.py")],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    (report,) = json.loads(proc.stdout)
    assert (report["node"], report["status"], report["host"]["kernel"]) == (VM.name, "fail", box.kernel)
    checks = {c["id"]: c for c in report["checks"]}
    assert checks["node.pci.gpus"]["status"] == "fail"
    assert checks["node.pci.gpus"]["measured"] == {"on_bus": 0, "bus_ids": []}
    assert checks["node.pci.gpus"]["reason"] == "0 H200 GPU(s) on the PCI bus, expected 1"
    assert checks["node.driver.loaded"]["reason"].startswith("the nvidia kernel module is not loaded")
    assert not [c for c in report["checks"] if c["status"] not in ("pass", "fail", "skip")], report["checks"]


#: The driver stage's nouveau step alone: the whole stage does nothing on a node without a GPU, and this VM has none.
BLACKLIST_DEPLOY = """\
from pyinfra import host

from gpu_provision.inventory import cluster_for, node_for
from gpu_provision.operations.commands import current_state, this_host
from gpu_provision.operations.packages import family
from gpu_provision.stages import driver

node = node_for(host)
request = driver.request(node, cluster_for(host))
driver.blacklist_nouveau(node, request, family(current_state(this_host(), request).system))
"""


def test_the_nouveau_blacklist_reaches_the_initramfs_once(  # type: ignore[no-untyped-def]
        rig, vm: Vm, login: dict[str, Any], pyinfra, tmp_path: Path, monkeypatch) -> None:
    """The driver stage's nouveau step on a real Debian kernel, as the sudo user: the blacklist is written, the real
    ``update-initramfs`` puts it into the running kernel's initramfs, and a second run changes nothing (no rebuild)."""
    from gpu_provision.stages.driver import BLACKLIST_TEXT

    assert vm_ssh(login, IN_INITRAMFS).stdout == ""
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(cluster_file(rig, tmp_path, login, "vagrant")))
    deploy = pyinfra.deploy(BLACKLIST_DEPLOY)
    first = pyinfra.run(REPO / "inventory.py", deploy, timeout=1200)
    assert first.returncode == 0, first.output[-4000:]
    assert first.totals()["success"] == 2, first.output[-4000:]  # the file, then the initramfs
    assert vm_ssh(login, IN_INITRAMFS).stdout == BLACKLIST_TEXT
    again = pyinfra.run(REPO / "inventory.py", deploy, timeout=1200)
    assert (again.returncode, again.totals()["success"]) == (0, 0), again.output[-4000:]


def test_a_reboot_is_real_and_keeps_the_disk(vm: Vm, login: dict[str, Any]) -> None:
    """``systemctl reboot`` in the guest: a new boot (boot id) of the same kernel on the same disk."""
    first = vm_ssh(login, "cat /proc/sys/kernel/random/boot_id; echo kept | sudo -n tee /var/tmp/mark >/dev/null")
    assert first.returncode == 0, first.stderr
    boot_id = reboot(vm, login)
    again = vm_ssh(login, "cat /var/tmp/mark")
    assert boot_id != first.stdout.strip() and again.stdout.strip() == "kept", again.stdout + again.stderr
    assert vm.running()  # the guest rebooted inside the same QEMU, as a machine does
