"""The rig's network safety and its teardown: blackhole route, and nothing left behind by ``down``.

Only ``ip route get`` is used to look at routing: no packet is ever sent to an address that is not up.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import procscan
import pytest

from gpu_provision_rig import network
from gpu_provision_rig.config import BRIDGE_NAME, SUBNET
from gpu_provision_rig.lifecycle import ssh_banner
from gpu_provision_rig.node import leader_pid

pytestmark = pytest.mark.rig


def test_subnet_blackholed_while_bridge_is_down(rig_exclusive, rig_nodes):
    rig = rig_exclusive
    assert network.route_get("10.77.0.5").startswith(f"10.77.0.5 dev {BRIDGE_NAME}")
    subprocess.run(["ip", "link", "set", BRIDGE_NAME, "down"], check=True)
    try:
        assert network.route_get("10.77.0.5") == "blackhole 10.77.0.5"
        assert "via" not in network.route_get("10.77.0.200")
    finally:
        subprocess.run(["ip", "link", "set", BRIDGE_NAME, "up"], check=True)
    rig.wait_ssh([n.name for n in rig_nodes])


def _processes_mentioning(text: str) -> list[str]:
    return procscan.processes(lambda proc, cmdline: text in cmdline)


def test_down_leaves_nothing_behind(rig_exclusive, rig_nodes):
    rig = rig_exclusive
    leaders = [leader_pid(rig.layout(n.name)) for n in rig_nodes]
    assert all(leaders)
    node_netns = {os.readlink(f"/proc/{pid}/ns/net") for pid in leaders}
    rig.down()
    state = str(rig.paths.state)
    assert _processes_mentioning(state) == []
    assert _processes_mentioning("gpu_provision_rig.") == []
    assert all(not Path(f"/proc/{pid}").exists() for pid in leaders)
    # Each node's own cgroups (gpu_provision_rig.cgroups) are gone with every process that was in them.
    assert [str(p) for p in Path("/sys/fs/cgroup").glob("**/gpu-provision-rig-*")] == []
    with open("/proc/self/mountinfo") as f:
        assert [line for line in f if state in line] == []
    assert not network.bridge_exists()
    assert not network.blackhole_present()
    assert SUBNET not in subprocess.run(["ip", "route", "show", "table", "all"], capture_output=True,
                                        text=True).stdout
    assert "vb-" not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    remaining_netns = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                remaining_netns.add(os.readlink(proc / "ns/net"))
            except OSError:
                continue
    assert node_netns.isdisjoint(remaining_netns)
    # The loopback addresses now answer "connection refused" locally; nothing reaches for the bridge subnet.
    assert all(ssh_banner(n.ssh_address, timeout=1) is None for n in rig_nodes)
    rig.down()
