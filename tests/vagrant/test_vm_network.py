"""The VM tier's QEMU command line keeps the network rules (only loopback for the controller, only the rig's proxy
and mirror for the guest), and the box builder's choices are refused or named clearly. No VM is started here: the
tier itself is ``tests/rig/test_vm.py``."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import pytest

from gpu_provision_rig import box, hostdeps
from gpu_provision_rig.config import APT_PROXY_PORT, BRIDGE_ADDRESS, MIRROR_PORT
from gpu_provision_rig.errors import RigError
from gpu_provision_rig.vm import VmSpec, qemu_argv


def netdev(spec: VmSpec) -> list[str]:
    argv = qemu_argv(spec, Path("/cache/disk.qcow2"), Path("/run/vm"))
    return argv[argv.index("-netdev") + 1].split(",")


def test_the_guest_network_is_restricted_and_forwards_only_the_rigs_services() -> None:
    options = netdev(VmSpec("vm1", "127.0.12.3"))
    assert options[0] == "user" and "restrict=on" in options
    forwards = [o for o in options if o.startswith(("hostfwd=", "guestfwd="))]
    assert forwards == [
        "hostfwd=tcp:127.0.12.3:22-:22",
        f"guestfwd=tcp:{BRIDGE_ADDRESS}:{APT_PROXY_PORT}-cmd:socat - TCP:{BRIDGE_ADDRESS}:{APT_PROXY_PORT}",
        f"guestfwd=tcp:{BRIDGE_ADDRESS}:{MIRROR_PORT}-cmd:socat - TCP:{BRIDGE_ADDRESS}:{MIRROR_PORT}",
    ]
    # Every address the host side connects to or listens on is loopback or the rig's own bridge address.
    for address in re.findall(r"(?:hostfwd=tcp:|TCP:)([0-9.]+)", ",".join(forwards)):
        assert ipaddress.ip_address(address).is_loopback or address == BRIDGE_ADDRESS


def test_the_cpu_is_emulated_unless_kvm_is_asked_for() -> None:
    spec = VmSpec("vm1", "127.0.12.3")
    emulated = qemu_argv(spec, Path("/d.qcow2"), Path("/run"))
    assert emulated[emulated.index("-accel") + 1] == "tcg" and emulated[emulated.index("-cpu") + 1] == "qemu64"
    kvm = qemu_argv(spec, Path("/d.qcow2"), Path("/run"), accel="kvm")
    assert kvm[kvm.index("-accel") + 1] == "kvm" and kvm[kvm.index("-cpu") + 1] == "host"


@pytest.mark.parametrize("address", ["127.0.10.3", "10.77.0.5", "127.0.12.0", "127.0.12.255", "127.0.12.x"])
def test_a_vm_address_outside_its_loopback_range_is_refused(address: str) -> None:
    with pytest.raises(RigError, match=r"is not 127\.0\.12\.N"):
        VmSpec("vm1", address)


def test_an_unknown_suite_names_the_known_ones() -> None:
    with pytest.raises(RigError, match="no box for Debian 'sid': choose bookworm, trixie"):
        box.suite("sid")


def test_the_box_key_follows_its_recipe() -> None:
    bookworm, trixie = box.suite("bookworm"), box.suite("trixie")
    assert box.box_key(bookworm) != box.box_key(trixie)
    assert box.box_key(bookworm, ("b", "a")) == box.box_key(bookworm, ("a", "b", "a"))
    assert box.box_path(Path("/c"), bookworm).name == f"gpu-provision-debian12-{box.box_key(bookworm)}"


def test_the_vm_tiers_host_packages_come_without_recommends() -> None:
    """vagrant recommends vagrant-libvirt and with it a libvirt daemon whose default network NATs guests out."""
    lean = hostdeps.lean_packages()
    assert {"vagrant", "qemu-system-x86", "socat", "extlinux"} <= set(lean)
    assert not set(lean) & set(hostdeps.host_packages())
