"""An interrupted MIG apply on a rig node (two simulated H200s, real systemd, the deployed applier): SIGTERM,
SIGHUP, the SSH channel closing under it, and ``kill -9`` in the middle of an apply, held at a known step by a
gate in front of ``nvidia-smi`` (the first GPU instance creation waits while /root/mig-gate exists).

Afterwards the GPU-holding unit it stopped (nvidia-persistenced, installed and enabled by the driver) runs again
and the record /var/lib/gpu-provision/mig-stopped.json is gone; after ``kill -9`` the next run and the boot unit
finish the layout from that record.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from test_mig import A_PLACED, B_PLACED, DEPLOY, HEADERS, A, B, cluster_doc, placed, reboot

from gpu_provision.bundle import BUNDLE_PATH
from gpu_provision_rig.config import SUDO_USER, RigNode

pytestmark = [pytest.mark.rig, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
RIG_NODE_SHAPES = [("H200", 2)]
RECORD = "/var/lib/gpu-provision/mig-stopped.json"
UNIT = "nvidia-persistenced.service"
GATE = "/root/mig-gate"
REACHED = "/root/mig-gate-reached"
B_LAYOUT = "/root/mig-layout-b.json"
#: The applier with ``nvidia-smi`` behind the gate, applying layout B (GPU 0: two 3g.71gb) in its own session.
APPLY = (f"env PATH=/root/gate-bin:$PATH python3 {BUNDLE_PATH} mig-apply apply --layout {B_LAYOUT}")


@pytest.fixture(scope="module")
def node(rig, rig_nodes) -> RigNode:  # type: ignore[no-untyped-def]
    """The module's node with two simulated H200s, fresh once per module."""
    rig.reset_node(rig_nodes[0].name)
    return rig_nodes[0]


def converge(rig, node: RigNode, ssh, pyinfra, monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Deploy layout A (bundle, layout file, boot unit) and lay out layout B's file and the gate."""
    assert ssh(node, HEADERS).returncode == 0
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(cluster_doc(rig, node, A, {"7g.141gb": 1}), sort_keys=False))
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(cluster))
    first = pyinfra.run(REPO / "inventory.py", pyinfra.deploy(DEPLOY, name="mig_deploy.py"), timeout=900)
    assert first.returncode == 0, first.output[-6000:]
    layout_b = {"version": "v1", "mig-configs": {node.name: [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"3g.71gb": 2}},
        {"devices": [1], "mig-enabled": True, "mig-devices": {"7g.141gb": 1}}]}}
    wrapper = ("#!/bin/sh\n"
               f'case " $* " in *" -cgi "*) if [ -e {GATE} ]; then : > {REACHED}; '
               f"while [ -e {GATE} ]; do sleep 0.05; done; fi;; esac\n"
               'exec REAL_SMI "$@"\n')
    setup = ssh(node, f"mkdir -p /root/gate-bin && cat > {B_LAYOUT} <<'EOF'\n{json.dumps(layout_b)}\nEOF\n"
                      f"cat > /root/gate-bin/nvidia-smi.new <<'EOF'\n{wrapper}EOF\n"
                      "sed -i \"s|REAL_SMI|$(command -v nvidia-smi)|\" /root/gate-bin/nvidia-smi.new && "
                      "chmod 755 /root/gate-bin/nvidia-smi.new && "
                      "mv /root/gate-bin/nvidia-smi.new /root/gate-bin/nvidia-smi")
    assert setup.returncode == 0, setup.stderr


@pytest.fixture
def at_a(rig, node, ssh, pyinfra, monkeypatch, tmp_path) -> RigNode:  # type: ignore[no-untyped-def]
    """The node at layout A with the holder unit running and no record or gate left (converged the first time)."""
    if ssh(node, f"test -x /root/gate-bin/nvidia-smi && test -e {BUNDLE_PATH}").returncode != 0:
        converge(rig, node, ssh, pyinfra, monkeypatch, tmp_path)
    reset = ssh(node, f"rm -f {GATE} {REACHED}; systemctl start {UNIT}; "
                      f"python3 {BUNDLE_PATH} mig-apply apply --layout /etc/gpu-provision/mig-layout.yaml")
    assert reset.returncode == 0, reset.stdout + reset.stderr
    assert placed(ssh, node, 0) == A_PLACED
    assert ssh(node, f"systemctl is-active {UNIT}").stdout.strip() == "active"
    assert ssh(node, f"test -e {RECORD}").returncode != 0
    return node


def wait_reached(ssh, node: RigNode, timeout: float = 120.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while ssh(node, f"test -e {REACHED}").returncode != 0:
        assert time.monotonic() < deadline, "the applier never reached the gate"
        time.sleep(0.5)
    assert UNIT in json.loads(ssh(node, f"cat {RECORD}").stdout)["units"]
    assert ssh(node, f"systemctl is-active {UNIT}").stdout.strip() == "inactive"


def held_in_background(ssh, node: RigNode) -> str:  # type: ignore[no-untyped-def]
    """Start the gated apply detached from SSH (its own session, output in /root/apply.out); its pid."""
    started = ssh(node, f"touch {GATE}; rm -f {REACHED}; setsid {APPLY} >/root/apply.out 2>&1 </dev/null & echo $!")
    pid = started.stdout.strip()
    assert pid.isdigit(), started.stdout + started.stderr
    wait_reached(ssh, node)
    return pid


def wait_gone(ssh, node: RigNode, pid: str, timeout: float = 120.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while ssh(node, f"kill -0 {pid}").returncode == 0:
        assert time.monotonic() < deadline, f"pid {pid} still running"
        time.sleep(0.5)


@pytest.mark.parametrize("name", ["TERM", "HUP"])
def test_signal_restarts_the_stopped_unit(at_a, ssh, name):  # type: ignore[no-untyped-def]
    pid = held_in_background(ssh, at_a)
    ssh(at_a, f"kill -{name} {pid}")
    wait_gone(ssh, at_a, pid)
    ssh(at_a, f"rm -f {GATE}")
    out = ssh(at_a, "cat /root/apply.out").stdout
    assert f"interrupted by SIG{name}" in out and "Traceback" not in out, out
    assert ssh(at_a, f"systemctl is-active {UNIT}").stdout.strip() == "active", out
    assert ssh(at_a, f"test -e {RECORD}").returncode != 0, out


def test_closed_ssh_channel_does_not_stop_the_apply(rig, at_a, ssh):  # type: ignore[no-untyped-def]
    """The applier runs in the foreground of an SSH session whose client dies: it finishes, units back."""
    ssh(at_a, f"touch {GATE}; rm -f {REACHED}")
    argv = ["ssh", "-F", "/dev/null", "-i", str(rig.paths.client_key), "-o",
            f"UserKnownHostsFile={rig.paths.known_hosts}", "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
            f"root@{at_a.ssh_address}", APPLY]
    client = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_reached(ssh, at_a)
    finally:
        client.kill()
        client.communicate()
    ssh(at_a, f"rm -f {GATE}")
    deadline = time.monotonic() + 120
    while ssh(at_a, "pgrep -f 'mig-apply apply --layout /root/[m]ig-layout-b'").returncode == 0:
        assert time.monotonic() < deadline, "the applier did not finish"
        time.sleep(0.5)
    assert placed(ssh, at_a, 0) == B_PLACED
    assert ssh(at_a, f"systemctl is-active {UNIT}").stdout.strip() == "active"
    assert ssh(at_a, f"test -e {RECORD}").returncode != 0


def killed(ssh, node: RigNode) -> None:  # type: ignore[no-untyped-def]
    pid = held_in_background(ssh, node)
    ssh(node, f"kill -KILL -- -{pid}")
    wait_gone(ssh, node, pid)
    ssh(node, f"rm -f {GATE}")
    assert ssh(node, f"systemctl is-active {UNIT}").stdout.strip() == "inactive"
    assert ssh(node, f"test -e {RECORD}").returncode == 0


def test_kill_9_is_finished_by_the_next_run(at_a, ssh):  # type: ignore[no-untyped-def]
    killed(ssh, at_a)
    again = ssh(at_a, f"python3 {BUNDLE_PATH} mig-apply apply --layout {B_LAYOUT}")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "an earlier apply was interrupted" in again.stdout
    assert placed(ssh, at_a, 0) == B_PLACED
    assert ssh(at_a, f"systemctl is-active {UNIT}").stdout.strip() == "active"
    assert ssh(at_a, f"test -e {RECORD}").returncode != 0


def test_kill_9_is_finished_by_the_boot_unit(rig, at_a, ssh):  # type: ignore[no-untyped-def]
    killed(ssh, at_a)
    reboot(rig, ssh, at_a)
    status = ssh(at_a, "systemctl show -p ActiveState,Result gpu-provision-mig.service").stdout
    assert "ActiveState=active" in status and "Result=success" in status, status
    journal = ssh(at_a, "journalctl -b -u gpu-provision-mig.service --no-pager").stdout
    assert "an earlier apply was interrupted" in journal, journal
    assert placed(ssh, at_a, 0) == A_PLACED
    assert ssh(at_a, f"systemctl is-active {UNIT}").stdout.strip() == "active"
    assert ssh(at_a, f"test -e {RECORD}").returncode != 0


def test_the_boot_unit_waits_for_an_apply_in_progress(at_a, ssh):  # type: ignore[no-untyped-def]
    """Two appliers on one node at once (one MIG applier per node): an apply by hand (the deploy's command, layout B)
    holds the node's applier lock, stopped at the gate in the middle of its GPU instance creation, while
    gpu-provision-mig.service starts (the boot unit, the layout file's A). The unit waits and names the holder; once
    the first apply finishes, the unit applies its layout after it. Neither fails, nothing is left half made."""
    pid = held_in_background(ssh, at_a)
    # The unit is a oneshot that remains active after it ran (at the last boot, say): 'start' would do nothing then,
    # so it is restarted, and only this invocation's journal is read.
    journal_now = ("journalctl --no-pager _SYSTEMD_INVOCATION_ID="
                   "$(systemctl show -p InvocationID --value gpu-provision-mig.service)")
    try:
        assert ssh(at_a, "systemctl restart --no-block gpu-provision-mig.service").returncode == 0
        deadline = time.monotonic() + 60
        journal = ""
        while "waiting up to" not in journal:
            assert time.monotonic() < deadline, journal
            time.sleep(0.5)
            journal = ssh(at_a, journal_now).stdout
        assert f"held by pid {pid}" in journal or f"pid {pid}" in journal, journal
        assert ssh(at_a, "systemctl show -p ActiveState --value gpu-provision-mig.service").stdout.strip() \
            == "activating"
    finally:
        ssh(at_a, f"rm -f {GATE}")
    wait_gone(ssh, at_a, pid)
    assert "Insufficient Resources" not in ssh(at_a, "cat /root/apply.out").stdout
    deadline = time.monotonic() + 180
    while ssh(at_a, "systemctl show -p ActiveState --value gpu-provision-mig.service").stdout.strip() == "activating":
        assert time.monotonic() < deadline, "the boot unit never finished"
        time.sleep(1)
    status = ssh(at_a, "systemctl show -p ActiveState,Result gpu-provision-mig.service").stdout
    assert "Result=success" in status, status + ssh(at_a, "journalctl -u gpu-provision-mig.service --no-pager").stdout
    assert placed(ssh, at_a, 0) == A_PLACED  # the boot unit's layout, applied after the apply by hand
    assert ssh(at_a, f"systemctl is-active {UNIT}").stdout.strip() == "active"
    assert ssh(at_a, f"test -e {RECORD}").returncode != 0


def test_a_deploy_waits_for_the_boot_unit(rig, at_a, ssh, pyinfra, monkeypatch, tmp_path):  # type: ignore[no-untyped-def]
    """The boot unit against a deploy (one MIG applier per node): gpu-provision-mig.service applies the layout file's
    A and is held at the gate in the middle of its GPU instance creation, holding the node's applier lock, while a
    real pyinfra deploy of layout B runs. The deploy's applier waits for the lock, then applies B after the unit's A:
    both succeed, the unit's journal shows A applied whole, and the GPUs end at the deploy's B. The module's other
    deploys log in as root; this one logs in as the sudo user, so the applier's lock is taken through sudo too."""
    from_b = ssh(at_a, f"python3 {BUNDLE_PATH} mig-apply apply --layout {B_LAYOUT}")  # so the unit has A to make
    assert from_b.returncode == 0, from_b.stdout + from_b.stderr
    layout_file = "/etc/gpu-provision/mig-layout.yaml"
    saved = ssh(at_a, f"cat {layout_file}").stdout
    dropin = "/etc/systemd/system/gpu-provision-mig.service.d/gate.conf"
    gated = ssh(at_a, f"mkdir -p {Path(dropin).parent} && printf '[Service]\\nEnvironment=PATH=/root/gate-bin:"
                      f"/usr/sbin:/usr/bin:/sbin:/bin\\n' > {dropin} && systemctl daemon-reload && "
                      f"touch {GATE} && rm -f {REACHED} && systemctl restart --no-block gpu-provision-mig.service")
    assert gated.returncode == 0, gated.stderr
    try:
        wait_reached(ssh, at_a)
        cluster = tmp_path / "cluster-b.yaml"
        doc = cluster_doc(rig, at_a, B, {"7g.141gb": 1})
        doc["cluster"]["ssh"]["user"] = SUDO_USER
        cluster.write_text(yaml.safe_dump(doc, sort_keys=False))
        monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(cluster))
        run = pyinfra.start(REPO / "inventory.py", pyinfra.deploy(DEPLOY, name="mig_deploy.py"))
        try:
            deadline = time.monotonic() + 300
            while ssh(at_a, "pgrep -f 'mig-apply [a]pply'").returncode != 0:
                assert run.poll() is None, run.communicate()[0][-6000:]
                assert time.monotonic() < deadline, "the deploy never started its applier"
                time.sleep(0.5)
            time.sleep(2)  # the deploy's applier is in its wait now: the unit still holds the lock at the gate
            assert ssh(at_a, "systemctl show -p ActiveState --value gpu-provision-mig.service").stdout.strip() \
                == "activating"
        finally:
            ssh(at_a, f"rm -f {GATE}")
        output, _ = run.communicate(timeout=900)
        assert run.returncode == 0, output[-6000:]
    finally:
        ssh(at_a, f"rm -f {GATE} {dropin}; systemctl daemon-reload; cat > {layout_file} <<'EOF'\n{saved}EOF")
    status = ssh(at_a, "systemctl show -p ActiveState,Result gpu-provision-mig.service").stdout
    journal = ssh(at_a, "journalctl --no-pager _SYSTEMD_INVOCATION_ID="
                        "$(systemctl show -p InvocationID --value gpu-provision-mig.service)").stdout
    assert "Result=success" in status, status + journal
    assert "applied: GPU 0: " + ", ".join(A_PLACED) in journal, journal
    assert "Insufficient Resources" not in journal + output
    assert placed(ssh, at_a, 0) == B_PLACED  # the deploy's layout, applied after the unit's
    assert ssh(at_a, f"systemctl is-active {UNIT}").stdout.strip() == "active"
    assert ssh(at_a, f"test -e {RECORD}").returncode != 0
    through_sudo = [line for line in ssh(at_a, "journalctl --no-pager -o cat _COMM=sudo").stdout.splitlines()
                    if "mig-apply apply" in line]
    assert through_sudo and all(line.lstrip().startswith(SUDO_USER + " :") for line in through_sudo), through_sudo
