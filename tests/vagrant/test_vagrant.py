"""The Vagrantfile (syntax and the settings it makes) and the cluster file generated from `vagrant ssh-config`.

No VM is booted: the Vagrantfile is loaded by Ruby against a recording stand-in for Vagrant's configuration API
(``data/vagrant_stub.rb``), and the generator is fed ssh-config text in the form ``vagrant ssh-config`` prints.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpu_provision.errors import GpuProvisionError
from gpu_provision.spec import load_cluster
from gpu_provision.vagrant import cluster_document, cluster_yaml, parse_ssh_config
from gpu_provision_rig import libvirt
from gpu_provision_rig.config import LIBVIRT_SUBNET

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
needs_ruby = pytest.mark.skipif(shutil.which("ruby") is None, reason="ruby is not installed (apt package ruby)")


def _vagrantfile_calls(**env: str) -> list[dict]:
    proc = subprocess.run(["ruby", str(DATA / "vagrant_stub.rb"), str(REPO / "Vagrantfile")], capture_output=True,
                          text=True, env={**os.environ, **env}, check=True)
    return json.loads(proc.stdout)


@needs_ruby
def test_vagrantfile_syntax():
    proc = subprocess.run(["ruby", "-c", str(REPO / "Vagrantfile")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Syntax OK" in proc.stdout


@needs_ruby
def test_vagrantfile_defaults_two_ubuntu_2204_nodes():
    calls = _vagrantfile_calls()
    machines = sorted({c["path"].split(".")[0] for c in calls if c["path"].startswith("machine:")})
    assert machines == ["machine:gpu-node1", "machine:gpu-node2"]
    assert {"path": "config.vm", "set": "box", "value": "generic/ubuntu2204"} in calls
    assert not [c for c in calls if c.get("call") == "pci"]


@needs_ruby
def test_vagrantfile_settings_from_environment():
    calls = _vagrantfile_calls(GP_NODES="3", GP_BOX="ubuntu2404", GP_CPUS="8", GP_MEMORY="16384",
                               GP_PCI="gpu-node2=0000:3b:00.0,0000:5e:00.0")
    assert {"path": "config.vm", "set": "box", "value": "generic/ubuntu2404"} in calls
    assert {"path": "machine:gpu-node3.provider:libvirt", "set": "memory", "value": 16384} in calls
    assert {"path": "machine:gpu-node3.provider:virtualbox", "set": "cpus", "value": 8} in calls
    pci = [(c["path"], c["kwargs"]) for c in calls if c.get("call") == "pci"]
    assert pci == [
        ("machine:gpu-node2.provider:libvirt", {"domain": "0x0000", "bus": "0x3b", "slot": "0x00", "function": "0x0"}),
        ("machine:gpu-node2.provider:libvirt", {"domain": "0x0000", "bus": "0x5e", "slot": "0x00", "function": "0x0"}),
    ]
    forwards = [c["kwargs"]["host_ip"] for c in calls if c.get("call") == "network"]
    assert forwards == ["127.0.10.1", "127.0.10.2", "127.0.10.3"]


@needs_ruby
def test_vagrantfile_takes_the_rigs_libvirt_settings():
    """What ``gpu-provision-rig libvirt up`` prints: emulated CPU, the isolated network with each node's fixed MAC,
    SSH on the node's loopback forwarder; nothing of it reaches the VirtualBox provider."""
    calls = _vagrantfile_calls(GP_NODES="2", **libvirt.vagrant_env("debian12"))
    assert {"path": "config.vm", "set": "box", "value": "gpu-provision/debian12"} in calls
    node2 = {c["set"]: c["value"] for c in calls if c["path"] == "machine:gpu-node2.provider:libvirt" and "set" in c}
    assert node2 == {
        "cpus": 2, "memory": 6144, "machine_type": "q35", "driver": "qemu", "cpu_mode": "custom",
        "cpu_model": "qemu64", "graphics_type": "none", "management_network_name": libvirt.NETWORK_NAME,
        "management_network_address": LIBVIRT_SUBNET, "management_network_mode": "none",
        "management_network_mac": libvirt.VagrantNode(2).mac}
    ssh = {c["set"]: c["value"] for c in calls if c["path"] == "machine:gpu-node2.override:libvirt.ssh"}
    assert ssh == {"host": libvirt.VagrantNode(2).ssh_address, "port": 22}


@needs_ruby
def test_vagrantfile_defaults_leave_libvirt_its_own_network_and_kvm():
    calls = _vagrantfile_calls()
    node1 = {c["set"]: c["value"] for c in calls if c["path"] == "machine:gpu-node1.provider:libvirt" and "set" in c}
    assert (node1["driver"], node1["cpu_mode"], node1["memory"]) == ("kvm", "host-passthrough", 6144)
    assert not [k for k in node1 if k.startswith("management_network")]
    assert not [c for c in calls if c["path"].endswith("override:libvirt.ssh")]


@needs_ruby
@pytest.mark.parametrize(("env", "message"), [
    ({"GP_NODES": "two"}, 'GP_NODES="two" is not a whole number'),
    ({"GP_PCI": "gpu-node7=0000:3b:00.0"}, "GP_PCI names nodes that do not exist: gpu-node7"),
    ({"GP_PCI": "gpu-node1=3b:00.0"}, 'PCI bus id "3b:00.0" is not DDDD:BB:SS.F'),
    ({"GP_LIBVIRT_DRIVER": "xen"}, 'GP_LIBVIRT_DRIVER="xen" is not kvm or qemu'),
    ({"GP_LIBVIRT_NETWORK": "vagrant-libvirt"}, 'GP_LIBVIRT_NETWORK="vagrant-libvirt" is not NAME=ADDRESS/PREFIX'),
    ({"GP_SSH_LOOPBACK": "10.0.0."}, 'GP_SSH_LOOPBACK="10.0.0." is not a loopback prefix'),
])
def test_vagrantfile_rejects_bad_settings(env, message):
    proc = subprocess.run(["ruby", str(DATA / "vagrant_stub.rb"), str(REPO / "Vagrantfile")], capture_output=True,
                          text=True, env={**os.environ, **env})
    assert proc.returncode != 0
    assert message in proc.stderr


def test_libvirt_ssh_config_to_cluster_file(tmp_path):
    hosts = parse_ssh_config((DATA / "vagrant-ssh-config-libvirt.txt").read_text())
    assert [(h.name, h.hostname, h.port, h.user) for h in hosts] == [
        ("gpu-node1", "192.168.121.93", 22, "vagrant"), ("gpu_Node2", "192.168.121.147", 22, "vagrant")]
    path = tmp_path / "vagrant.yaml"
    path.write_text(cluster_yaml(hosts, name="lab-vms", gpu_model="H200", gpus=1))
    cluster = load_cluster(path)
    assert [n.name for n in cluster.nodes] == ["gpu-node1", "gpu-node2"]
    assert [n.address for n in cluster.nodes] == ["192.168.121.93", "192.168.121.147"]
    node = cluster.nodes[1]
    assert node.ssh.user == "vagrant"
    assert node.ssh.port == 22
    assert node.ssh.key is not None and node.ssh.key.endswith("/machines/gpu_Node2/libvirt/private_key")
    assert (node.gpus.model, node.gpus.count) == ("H200", 1)
    assert cluster.ssh.strict_host_key_checking is False
    assert [n.role for n in cluster.nodes] == ["control-plane", "worker"]


def test_virtualbox_ssh_config_keeps_port_and_loopback_addresses(tmp_path):
    hosts = parse_ssh_config((DATA / "vagrant-ssh-config-virtualbox.txt").read_text())
    doc = cluster_document(hosts, kubernetes=False)
    assert doc["cluster"]["kubernetes"] == {"enabled": False}
    assert [n["address"] for n in doc["nodes"]] == ["127.0.10.1", "127.0.10.2"]
    assert all(n["ssh"]["port"] == 2222 for n in doc["nodes"])
    assert "gpus" not in doc["nodes"][0]
    path = tmp_path / "vagrant.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert [n.ssh.port for n in load_cluster(path).nodes] == [2222, 2222]


def test_shared_address_is_refused():
    text = (DATA / "vagrant-ssh-config-virtualbox.txt").read_text().replace("127.0.10.2", "127.0.10.1")
    with pytest.raises(GpuProvisionError, match=r"several machines are reached at 127\.0\.10\.1"):
        cluster_document(parse_ssh_config(text))


def test_strict_checking_kept_when_ssh_config_has_it():
    text = (DATA / "vagrant-ssh-config-libvirt.txt").read_text().replace("StrictHostKeyChecking no",
                                                                        "StrictHostKeyChecking yes")
    assert "strict_host_key_checking" not in cluster_document(parse_ssh_config(text))["cluster"]["ssh"]


@pytest.mark.parametrize("text", ["", "# nothing\n", "Host a\n  User vagrant\n"])
def test_unusable_ssh_config_is_refused(text):
    with pytest.raises(GpuProvisionError):
        parse_ssh_config(text)


def test_cli_writes_cluster_file(tmp_path):
    from gpu_provision.cli import main

    out = tmp_path / "c.yaml"
    assert main(["vagrant-cluster", str(DATA / "vagrant-ssh-config-libvirt.txt"), "-o", str(out)]) == 0
    assert out.read_text().startswith("# Generated by `gpu-provision vagrant-cluster`")
    assert len(load_cluster(out).nodes) == 2
