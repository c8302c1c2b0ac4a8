"""The VM tier's guest: its box, the booted VM, the login and SSH to it, and a cluster file naming it.

Test modules import the fixtures by name (``box = vmguest.box``) and set ``VM`` (a :class:`VmSpec` with a
``127.0.12.N`` address of their own), so two modules never share a guest. Every test runs on the Debian 12 box,
then on the Debian 13 one.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from clusterdirs import controller_dirs

from gpu_provision_rig.box import Box, ensure_box, vagrant_keys
from gpu_provision_rig.vm import Vm, VmSpec

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=["bookworm", "trixie"])
def box(rig, request: pytest.FixtureRequest) -> Box:  # type: ignore[no-untyped-def]
    """The Debian 12 box, then the Debian 13 one, from the rig's cache (built on first use)."""
    return ensure_box(rig.paths.cache, request.param)


@pytest.fixture(scope="module")
def vm(rig, rig_nodes, box: Box, request: pytest.FixtureRequest,  # type: ignore[no-untyped-def]
       tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vm]:
    """One VM of the module's ``VM`` spec from the box, booted, stopped at the end of the module."""
    spec: VmSpec = request.module.VM
    machine = Vm(spec, box, tmp_path_factory.mktemp(f"vm-{box.name}") / spec.name)
    machine.start()
    try:
        machine.wait_ssh()
        yield machine
    finally:
        machine.stop()


@pytest.fixture(scope="module")
def login(vm: Vm, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Vagrant's insecure private key (mode 0600, as ssh wants it), the VM's host keys as known_hosts, and its
    address."""
    folder = tmp_path_factory.mktemp("vm-login")
    key = folder / "vagrant"
    key.write_bytes((vagrant_keys() / "vagrant").read_bytes())
    key.chmod(0o600)
    scan = subprocess.run(["ssh-keyscan", "-T", "10", "-t", "ed25519", vm.spec.ssh_address], capture_output=True,
                          text=True, timeout=60)
    assert scan.returncode == 0 and scan.stdout.strip(), scan.stderr
    known = folder / "known_hosts"
    known.write_text(scan.stdout)
    return {"key": key, "known_hosts": known, "address": vm.spec.ssh_address}


def _options(login: dict[str, Any]) -> list[str]:
    return ["-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={login['known_hosts']}",
            "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=10", "-i", str(login["key"])]


def vm_ssh(login: dict[str, Any], command: str, user: str = "vagrant",
           timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``command`` on the VM over real SSH as ``user``."""
    return subprocess.run(["ssh", *_options(login), f"{user}@{login['address']}", command], capture_output=True,
                          text=True, timeout=timeout)


def vm_copy(login: dict[str, Any], source: Path, target: str) -> None:
    """Copies a controller file to ``target`` on the VM (scp as the box's user)."""
    done = subprocess.run(["scp", "-q", *_options(login), str(source), f"vagrant@{login['address']}:{target}"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr


def enable_root_login(login: dict[str, Any]) -> None:
    """Root's login with the box's key (the box allows the vagrant user only), set up through sudo."""
    done = vm_ssh(login, "sudo -n install -d -m 0700 /root/.ssh && "
                         "sudo -n cp /home/vagrant/.ssh/authorized_keys /root/.ssh/")
    assert done.returncode == 0, done.stderr


def cluster_doc(rig, login: dict[str, Any], user: str, name: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """The rig's host-stack cluster file with the VM as its one node (one H200, which it has not), reached as
    ``user``; the caller adjusts it."""
    doc: dict[str, Any] = yaml.safe_load((REPO / "tests/rig/clusters/host-stack.yaml").read_text())
    doc["cluster"]["name"] = "vm-tier"
    doc["cluster"]["ssh"] = {"user": user, "key": str(login["key"]), "known_hosts": str(login["known_hosts"])}
    doc["cluster"]["controller_dirs"] = [*controller_dirs(rig), str(login["key"].parent)]
    doc["nodes"] = [{"name": name, "address": login["address"], "gpus": {"model": "H200", "count": 1}}]
    return doc


def write_cluster(doc: dict[str, Any], folder: Path, user: str) -> Path:
    """``doc`` as ``folder/cluster-<user>.yaml``."""
    path = folder / f"cluster-{user}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


#: The nouveau blacklist as the initramfs of the running kernel holds it.
IN_INITRAMFS = ("d=$(mktemp -d) && sudo -n unmkinitramfs /boot/initrd.img-$(uname -r) $d && "
                "sudo -n find $d -path '*/etc/modprobe.d/blacklist-nouveau.conf' -exec cat {} + ; sudo -n rm -rf $d")


def reboot(vm: Vm, login: dict[str, Any], timeout: float = 300) -> str:
    """``systemctl reboot`` in the guest, waiting until the new boot is over; the new boot's id (the old sshd may
    still answer for a moment, so the boot id tells the boots apart)."""
    first = vm_ssh(login, "cat /proc/sys/kernel/random/boot_id")
    assert first.returncode == 0, first.stderr
    vm_ssh(login, "sudo -n systemctl reboot", timeout=60)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(5)
        vm.wait_ssh()
        again = vm_ssh(login, "timeout 240 systemctl is-system-running --wait >/dev/null; "
                              "cat /proc/sys/kernel/random/boot_id", timeout=300)
        if again.returncode == 0 and again.stdout.strip() not in ("", first.stdout.strip()):
            return again.stdout.strip()
    raise AssertionError(f"{vm.spec.name}: no new boot after {timeout:.0f}s; serial log: {vm.serial_log}")
