"""The rig itself is dependable: fresh nodes boot to ``running`` every time, each in cgroups of its own, and
stopping a node returns only when none of its processes is left, even when its clean poweroff hangs.

These tests bring up and remove their own nodes (``rt<pid>-<N>`` on ``127.0.10.N``: session nodes, dropped by a
later session if this one dies), leaving other users' nodes alone.
"""

from __future__ import annotations

import os
from pathlib import Path

import procscan
import pytest

from gpu_provision_rig import cgroups
from gpu_provision_rig.config import RigNode
from gpu_provision_rig.node import is_mounted, leader_pid

pytestmark = pytest.mark.rig

ROUNDS = 3
#: Messages the node's systemd logs when its cgroups are shared with other nodes (see gpu_provision_rig.cgroups).
CGROUP_TROUBLE = ("Failed to migrate controller cgroups", "Failed to attach", "status=219/CGROUP")


def own_nodes(count: int, first_index: int) -> list[RigNode]:
    """Nodes of this test session (named by address), two with simulated GPUs, on loopback addresses no other test
    module uses."""
    shapes = [("H200", 2), (None, 0), ("L40S", 1)]
    return [RigNode(f"rt{os.getpid()}-{first_index + i}", f"127.0.10.{first_index + i}", *shapes[i % 3])
            for i in range(count)]


def node_processes(node_dir: Path, pid_ns: str) -> list[str]:
    """Processes of a node: those in its pid namespace (its systemd and all it runs) and those on the host whose
    command line names the node's directory (the node process, nspawn)."""
    return procscan.processes(lambda proc, cmdline: os.readlink(proc / "ns/pid") == pid_ns or
                              str(node_dir) in cmdline)


def test_fresh_nodes_boot_to_running_each_in_its_own_cgroups(rig):  # type: ignore[no-untyped-def]
    nodes = own_nodes(3, 111)
    rig.up(nodes)
    try:
        for round_ in range(ROUNDS):
            if round_:  # all fresh again, booting at the same time as a new `rig up` does
                for node in nodes:
                    rig.reset_node(node.name, wait=False)
                rig.wait_ssh([n.name for n in nodes])
            placed = set()
            for node in nodes:
                state = rig.node_exec(node.name, ["sh", "-c", "systemctl is-system-running --wait; "
                                                  "systemctl --failed --no-legend --no-pager"], timeout=120)
                assert state.stdout.strip() == "running", (round_, node.name, state.stdout)
                journal = rig.node_exec(node.name, ["journalctl", "-b", "--no-pager", "-o", "cat"], timeout=60).stdout
                assert not [line for line in journal.splitlines() if any(t in line for t in CGROUP_TROUBLE)], \
                    (round_, node.name)
                leader = leader_pid(rig.layout(node.name))
                paths = cgroups.own_paths(leader)
                assert f"/{cgroups.PREFIX}{node.name}/" in paths["name=systemd"], paths
                placed.add(paths["name=systemd"])
            assert len(placed) == len(nodes)
    finally:
        rig.remove([n.name for n in nodes])


def test_remove_returns_only_when_nothing_is_left(rig):  # type: ignore[no-untyped-def]
    (node,) = own_nodes(1, 114)
    rig.up([node])
    try:
        check_remove(rig, node)
    finally:
        rig.remove([node.name])


def check_remove(rig, node: RigNode) -> None:  # type: ignore[no-untyped-def]
    layout = rig.layout(node.name)
    # A unit that ignores SIGTERM holds up the node's clean poweroff, and the node process has lost sight of the
    # node's PID 1 (as during a reboot), so stopping it has to wait for a poweroff that does not come in time.
    stubborn = rig.node_exec(node.name, [
        "systemd-run", "--unit=rig-stubborn", "-p", "TimeoutStopSec=300", "-p", "KillMode=process",
        "sh", "-c", "trap '' TERM; while :; do sleep 1; done"], timeout=60)
    assert stubborn.returncode == 0, stubborn.stderr
    paths = cgroups.recorded(layout.dir)
    pid_ns = os.readlink(f"/proc/{leader_pid(layout)}/ns/pid")
    assert paths and cgroups.processes(layout.dir)
    assert len(node_processes(layout.dir, pid_ns)) > 5
    layout.leader_pidfile.unlink()

    rig.remove([node.name])

    assert node_processes(layout.dir, pid_ns) == []
    assert not any(path.exists() for path in paths)
    assert not is_mounted(layout.root)
