"""Rig nodes: SSH through the loopback forwarders, real systemd, simulated GPUs, device nodes, resets, CLI."""

from __future__ import annotations

import json
import time

import pytest

from gpu_provision_rig.cli import main as cli_main
from gpu_provision_rig.config import PASSWORD_SUDO_USER, SUDO_PASSWORD, SUDO_USER
from gpu_provision_rig.hardware import gpu_uuid
from gpu_provision_rig.node import leader_pid

pytestmark = pytest.mark.rig


def test_ssh_with_strict_host_key_checking(rig_nodes, ssh):
    for node in rig_nodes:
        result = ssh(node, "hostname; id -u")
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == [node.name, "0"]


def test_sudo_login_users(rig_nodes, ssh):
    node = rig_nodes[0]
    # The passwordless sudo user: the rig's key, then root without a prompt.
    ops = ssh(node, "id -un; sudo -n id -u", user=SUDO_USER)
    assert ops.stdout.split() == [SUDO_USER, "0"], ops.stderr
    # The other one: sudo refuses without the password, accepts it on stdin, refuses a wrong one.
    no_password = ssh(node, "sudo -n id -u", user=PASSWORD_SUDO_USER)
    assert no_password.returncode != 0 and "password is required" in no_password.stderr
    given = ssh(node, "sudo -S -p '' id -u", user=PASSWORD_SUDO_USER, input=SUDO_PASSWORD + "\n")
    assert given.stdout.split() == ["0"], given.stderr
    wrong = ssh(node, "sudo -S -p '' id -u", user=PASSWORD_SUDO_USER, input="wrong\nwrong\nwrong\n")
    assert wrong.returncode != 0 and wrong.stdout == ""
    # Neither logs in with a password over SSH.
    assert "passwordauthentication no" in ssh(node, "sshd -T").stdout.splitlines()


def test_known_hosts_names_nodes_by_loopback_address(rig, rig_nodes):
    entries = {line.split()[0]: line.split()[1] for line in rig.paths.known_hosts.read_text().splitlines()}
    assert {n.ssh_address: "ssh-ed25519" for n in rig_nodes}.items() <= entries.items()


def test_systemd_is_pid_1_and_running(rig_nodes, ssh):
    result = ssh(rig_nodes[0], "cat /proc/1/comm; systemctl is-system-running --wait")
    assert result.stdout.split() == ["systemd", "running"], result.stderr


def test_node_address_on_bridge_and_no_way_out(rig_nodes, ssh):
    node = rig_nodes[0]
    result = ssh(node, "ip -4 -o addr show dev host0; ip route get 10.78.0.1 2>&1 || true")
    assert f"inet {node.bridge_address}/24" in result.stdout
    # No default route in the node: it cannot even name a path to the outside (nothing is sent).
    assert "unreachable" in result.stdout


def test_gpu_description_written_before_boot(rig_nodes, ssh):
    gpu_node, plain_node = rig_nodes
    gpus = json.loads(ssh(gpu_node, "cat /etc/gpu-sim/gpus.json").stdout)["gpus"]
    assert [(g["model"], g["index"], g["pci_bus_id"]) for g in gpus] == [
        ("H200", 0, "00000000:00:06.0"), ("H200", 1, "00000000:00:07.0")]
    assert gpus[1]["uuid"] == gpu_uuid(gpu_node.name, 1)
    assert json.loads(ssh(plain_node, "cat /etc/gpu-sim/gpus.json").stdout) == {"gpus": []}


def test_pci_view_shows_the_gpus(rig_nodes, ssh):
    gpu_node, plain_node = rig_nodes
    script = ("for d in /sys/bus/pci/devices/*; do echo $(basename $d) $(cat $d/vendor) $(cat $d/device) "
              "$(cat $d/class); done")
    nvidia = [line.split() for line in ssh(gpu_node, script).stdout.splitlines() if " 0x10de " in line]
    assert nvidia == [["0000:00:06.0", "0x10de", "0x2335", "0x030200"],
                      ["0000:00:07.0", "0x10de", "0x2335", "0x030200"]]
    assert " 0x10de " not in ssh(plain_node, script).stdout


def test_mknod_of_nvidia_device_nodes(rig_nodes, ssh):
    result = ssh(rig_nodes[0], "mknod /dev/nvidia0 c 195 0 && mknod /dev/nvidiactl c 195 255 && "
                               "stat -c '%F %t:%T' /dev/nvidia0 /dev/nvidiactl && rm /dev/nvidia0 /dev/nvidiactl")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["character special file c3:0", "character special file c3:ff"]


def test_up_again_changes_nothing(rig, rig_nodes):
    leaders = [leader_pid(rig.layout(n.name)) for n in rig_nodes]
    rig.up(rig_nodes)
    assert [leader_pid(rig.layout(n.name)) for n in rig_nodes] == leaders


def test_reset_makes_node_fresh_and_keeps_its_host_key(rig, rig_nodes, ssh, reset_node):
    node = rig_nodes[1]
    assert ssh(node, "touch /root/left-behind").returncode == 0
    reset_node(node.name)
    result = ssh(node, "test -e /root/left-behind && echo present || echo absent")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "absent"


def test_node_reboot_from_inside_comes_back(rig, rig_nodes, ssh):
    node = rig_nodes[1]
    ssh(node, "systemctl is-system-running --wait")
    before = leader_pid(rig.layout(node.name))
    ssh(node, "systemctl reboot")
    deadline = time.monotonic() + 60
    while leader_pid(rig.layout(node.name)) in (before, None) and time.monotonic() < deadline:
        time.sleep(0.1)
    rig.wait_ssh([node.name])
    after = leader_pid(rig.layout(node.name))
    assert after is not None and after != before
    state = ssh(node, "systemctl is-system-running --wait; systemctl --failed --no-legend --no-pager").stdout
    assert state.strip() == "running", state


def test_cli_inventory_and_status(rig_nodes, capsys):
    assert cli_main(["inventory", "--json"]) == 0
    listed = {n["name"]: n for n in json.loads(capsys.readouterr().out)}
    assert [(listed[n.name]["ssh_address"], listed[n.name]["bridge_address"], listed[n.name]["state"])
            for n in rig_nodes] == [(n.ssh_address, n.bridge_address, "running") for n in rig_nodes]
    cli_main(["status"])
    out = capsys.readouterr().out
    assert "apt_proxy: True" in out and "bridge: True" in out and "blackhole_route: True" in out
    for n in rig_nodes:
        assert f"{n.name} " in out and f" {n.ssh_address} " in out


MIRROR_PROBE = """\
import urllib.error, urllib.request
base = "http://10.77.0.1:8080/"
print(urllib.request.urlopen(base, timeout=10).status)
try:
    urllib.request.urlopen(urllib.request.Request(base + "x", data=b"x", method="PUT"), timeout=10)
except urllib.error.HTTPError as exc:
    print(exc.code)
"""


def test_mirror_is_served_read_only_on_the_bridge(rig_nodes, ssh):
    result = ssh(rig_nodes[0], f"python3 - <<'EOF'\n{MIRROR_PROBE}EOF")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["200", "501"]


PROXY_PROBE = """\
import socket
for request in (b"CONNECT deb.debian.org:443 HTTP/1.1\\r\\nHost: deb.debian.org:443\\r\\n\\r\\n",
                b"GET http://deb.debian.org/not-the-archive/x HTTP/1.1\\r\\nHost: deb.debian.org\\r\\n\\r\\n"):
    with socket.create_connection(("10.77.0.1", 3142), timeout=10) as s:
        s.sendall(request)
        print(s.recv(64).split(b"\\r\\n")[0].decode())
"""


def test_apt_proxy_refuses_anything_but_the_debian_archive(rig_nodes, ssh):
    result = ssh(rig_nodes[0], f"python3 - <<'EOF'\n{PROXY_PROBE}EOF")
    assert result.returncode == 0, result.stderr
    assert [line.split()[1] for line in result.stdout.splitlines()] == ["403", "403"]
