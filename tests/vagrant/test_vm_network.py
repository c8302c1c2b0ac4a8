"""The VM tier's QEMU command line and the isolated libvirt network of ``vagrant up`` keep the network rules (only
loopback for the controller, only the rig's services for the guest), and the box builder's choices are refused or
named clearly. No VM is started here: the tiers themselves are ``tests/rig/test_vm.py`` and
``tests/rig/test_vagrant_up.py``."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from xml.etree import ElementTree

import pytest
import yaml

from gpu_provision.spec import load_cluster
from gpu_provision_rig import box, cli, forward, hostdeps, libvirt
from gpu_provision_rig.config import APT_PROXY_PORT, BRIDGE_ADDRESS, LIBVIRT_SUBNET, MIRROR_PORT, SUBNET
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


def test_secure_boot_firmware_needs_smm_and_the_vms_own_variable_store() -> None:
    """Debian's ``ovmf`` README: the Secure Boot code image aborts without SMM; the variable store is the VM's copy
    (where ``mokutil`` writes), the code image read-only."""
    argv = qemu_argv(VmSpec("vm1", "127.0.12.3"), Path("/d.qcow2"), Path("/run"), uefi_vars=Path("/run/VARS.fd"))
    assert argv[argv.index("-machine") + 1] == "q35,smm=on"
    assert argv[argv.index("-global") + 1] == "driver=cfi.pflash01,property=secure,value=on"
    drives = [argv[i + 1] for i, word in enumerate(argv) if word == "-drive"]
    assert drives[:2] == [f"if=pflash,format=raw,unit=0,readonly=on,file={box.OVMF_CODE}",
                          "if=pflash,format=raw,unit=1,file=/run/VARS.fd"]
    assert "-machine" not in qemu_argv(VmSpec("vm1", "127.0.12.3"), Path("/d.qcow2"), Path("/run"))


def test_secure_boot_boxes_are_a_recipe_of_their_own() -> None:
    for codename in box.SUITES:
        suite = box.suite(codename)
        assert box.box_key(suite, secure_boot=True) != box.box_key(suite)
        assert box.box_path(Path("/c"), suite, secure_boot=True).name == (
            f"gpu-provision-{suite.name}-sb-{box.box_key(suite, secure_boot=True)}")
    with pytest.raises(RigError, match="no box for Debian 'sid'"):
        box.ensure_box(Path("/nonexistent"), "sid", secure_boot=True)


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
    """libvirt's recommended packages bring daemons and drivers nothing here uses."""
    lean = hostdeps.lean_packages()
    assert {"vagrant", "vagrant-libvirt", "libvirt-daemon-system", "dnsmasq-base", "qemu-system-x86", "socat",
            "extlinux"} <= set(lean)
    assert not set(lean) & set(hostdeps.host_packages())


def test_the_libvirt_network_is_isolated_with_fixed_leases_and_one_route_to_the_rig() -> None:
    """No ``<forward>`` element (libvirt's isolated mode: no NAT, forwarding rejected), a lease per node MAC, and
    DHCP's classless static route (option 121) to the rig's subnet only: no default route for the guests."""
    root = ElementTree.fromstring(libvirt.network_xml(3))
    assert root.find("forward") is None and root.findtext("name") == libvirt.NETWORK_NAME
    assert root.find("ip").attrib == {"address": "10.77.1.1", "netmask": "255.255.255.0"}
    hosts = [(h.get("mac"), h.get("ip")) for h in root.iter("host")]
    assert hosts == [("52:54:00:77:01:01", "10.77.1.11"), ("52:54:00:77:01:02", "10.77.1.12"),
                     ("52:54:00:77:01:03", "10.77.1.13")]
    options = [o.get("value") for o in root.iter("{http://libvirt.org/schemas/network/dnsmasq/1.0}option")]
    assert options == [f"dhcp-option=option:classless-static-route,{SUBNET},10.77.1.1"]


@pytest.mark.parametrize("count", [0, libvirt.MAX_NODES + 1])
def test_the_libvirt_network_refuses_node_counts_it_has_no_leases_for(count: int) -> None:
    with pytest.raises(RigError, match=f"fixed leases for 1 to {libvirt.MAX_NODES} nodes"):
        libvirt.nodes(count)


def test_forwarders_reach_only_the_rigs_two_subnets() -> None:
    """The VMs' network joins the nspawn nodes' bridge as a forwarding target; nothing else does."""
    assert forward.TARGET_SUBNETS == (SUBNET, LIBVIRT_SUBNET)
    for node in libvirt.nodes(libvirt.MAX_NODES):
        assert ipaddress.ip_address(node.address) in ipaddress.ip_network(LIBVIRT_SUBNET)
        assert ipaddress.ip_address(node.ssh_address).is_loopback
    with pytest.raises(SystemExit):
        forward.main(["127.0.13.1:22", "192.168.121.10:22"])


def test_the_rig_cluster_file_names_the_apt_proxy_and_validates(tmp_path: Path) -> None:
    """``gpu-provision-rig libvirt cluster``: the product's file from ``vagrant ssh-config``, plus the rig's proxy and
    Debian's Docker; a valid cluster file whose nodes are the Vagrant machines on their loopback forwarders."""
    config = tmp_path / "ssh-config"
    config.write_text("Host gpu-node1\n  HostName 127.0.13.1\n  User vagrant\n  Port 22\n  StrictHostKeyChecking no\n"
                      f"  IdentityFile {tmp_path}/machines/gpu-node1/libvirt/private_key\n")
    path = tmp_path / "cluster.yaml"
    assert cli.main(["libvirt", "cluster", str(config), "-o", str(path), "--user", "root"]) == 0
    cluster = load_cluster(path)
    (node,) = cluster.nodes
    assert (node.name, node.address, node.ssh.user) == ("gpu-node1", "127.0.13.1", "root")
    doc = yaml.safe_load(path.read_text())
    assert doc["cluster"]["mirrors"] == {"package_proxy": f"http://{BRIDGE_ADDRESS}:{APT_PROXY_PORT}/"}
    assert doc["defaults"]["container_runtime"]["docker_source"] == "distro"
    assert doc["cluster"]["kubernetes"] == {"enabled": False}
