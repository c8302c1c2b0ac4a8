"""The node-side applier on simulated H200s: layouts A -> B -> A, idempotence, busy GPUs, held services, pending
MIG mode, and the layout back after a reboot (the boot unit's ``boot`` command)."""

from __future__ import annotations

import subprocess
import time

from migsim import MigNode

from gpu_provision.node.mig.nvsmi import parse_lgi

BALANCED = ["2g.35gb@0:2", "1g.18gb@2:1", "1g.18gb@3:1", "3g.71gb@4:4"]


def doc(gpu0: dict | None, gpu1: dict | None = None, enabled: bool = True) -> dict:
    """A mig-parted v1 document with one config for the node."""
    entries = [{"device-filter": ["0x233510DE"], "devices": [0], "mig-enabled": enabled, "mig-devices": gpu0 or {}}]
    if not enabled:
        del entries[0]["mig-devices"]
    if gpu1 is not None:
        entries.append({"devices": [1], "mig-enabled": True, "mig-devices": gpu1})
    return {"version": "v1", "mig-configs": {"node-1": entries}}


A = doc({"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}, {"7g.141gb": 1})
B = doc({"3g.71gb": 2}, {"7g.141gb": 1})


def test_layout_a_b_a_and_idempotence(mig_node: MigNode) -> None:
    first = mig_node.apply(A)
    assert first.returncode == 0, first.stdout + first.stderr
    assert mig_node.mode(0) == "Enabled, Enabled"
    assert mig_node.lgi(0) == BALANCED
    assert mig_node.lgi(1) == ["7g.141gb@0:8"]

    again = mig_node.apply(A)
    assert again.returncode == 0
    assert "every GPU has its layout" in again.stdout
    assert "create" not in again.stdout and "destroy" not in again.stdout

    to_b = mig_node.apply(B)
    assert to_b.returncode == 0, to_b.stdout
    assert mig_node.lgi(0) == ["3g.71gb@0:4", "3g.71gb@4:4"]
    # Only the difference: 3g.71gb@4:4 and all of GPU 1 stay as they were.
    assert "destroy GPU instance" in to_b.stdout and "3g.71gb@4:4" not in to_b.stdout.split("applied:")[0]
    assert "GPU 1" not in to_b.stdout.split("applied:")[0]

    back = mig_node.apply(A)
    assert back.returncode == 0, back.stdout
    assert mig_node.lgi(0) == BALANCED
    assert mig_node.apply(A).returncode == 0


def test_every_instance_has_its_compute_instance(mig_node: MigNode) -> None:
    assert mig_node.apply(A).returncode == 0
    lci = mig_node.sh("nvidia-smi", "mig", "-lci", "-i", "0", check=True).stdout
    names = sorted(line.split("MIG")[1].split()[0] for line in lci.splitlines() if " MIG " in line)
    assert names == ["1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"]


def test_missing_compute_instance_is_recreated(mig_node: MigNode) -> None:
    assert mig_node.apply(A).returncode == 0
    listing = parse_lgi(mig_node.sh("nvidia-smi", "mig", "-lgi", "-i", "0", check=True).stdout)
    gi = next(g["instance_id"] for g in listing if g["profile"] == "3g.71gb")
    mig_node.sh("nvidia-smi", "mig", "-i", "0", "-gi", str(gi), "-ci", "0", "-dci", check=True)
    plan = mig_node.apply(A, command="plan")
    assert plan.returncode == 0
    assert plan.stdout.splitlines()[0] == f"GPU 0: create the compute instance of GPU instance {gi} (3g.71gb)"
    assert mig_node.apply(A).returncode == 0
    assert "no compute instance" not in mig_node.apply(A, command="plan").stdout


def test_busy_gpu_refused_with_pid_and_name(mig_node: MigNode) -> None:
    assert mig_node.apply(A).returncode == 0
    holder = subprocess.Popen(["gpu-sim", "hold", "--gpu", "0", "--gi", "3", "--", "sleep", "60"], env=mig_node.env)
    try:
        for _ in range(50):
            if "sleep" in mig_node.sh("nvidia-smi", "--query-compute-apps=pid,process_name",
                                      "--format=csv,noheader").stdout:
                break
            time.sleep(0.1)
        refused = mig_node.apply(B)
        assert refused.returncode == 1
        line = refused.stdout.strip().splitlines()[-1]
        assert line.startswith("gpu-provision-mig: GPU 0: refused: GPU 0 is in use by ")
        assert "(sleep)" in line and "mig.allow_drain" in line
        assert mig_node.lgi(0) == BALANCED, "a refused change must leave the layout untouched"
        drained = mig_node.apply(B, "--allow-drain")
        assert drained.returncode == 0, drained.stdout
        assert "stopping sleep (pid" in drained.stdout
        assert mig_node.lgi(0) == ["3g.71gb@0:4", "3g.71gb@4:4"]
    finally:
        holder.kill()
        holder.wait()


def test_holder_services_stopped_and_started_again(mig_node: MigNode) -> None:
    """nvidia-dcgm holds the GPUs (a simulator client): enabling MIG only works because it is stopped first."""
    mig_node.start_units("nvidia-dcgm.service", "kubelet.service", "nvidia-persistenced.service")
    result = mig_node.apply(A)
    assert result.returncode == 0, result.stdout
    assert mig_node.mode(0) == "Enabled, Enabled"
    log = mig_node.service_log()
    assert log[0] == "stop kubelet.service nvidia-dcgm.service nvidia-persistenced.service"
    assert log[-1] == "start nvidia-persistenced.service nvidia-dcgm.service kubelet.service"
    states = mig_node.sh("systemctl", "is-active", "kubelet.service", "nvidia-dcgm.service").stdout.split()
    assert states == ["active", "active"]


def test_pending_mode_without_reboot_is_reported(mig_node: MigNode) -> None:
    """A GPU client the applier does not manage keeps MIG enable pending and refuses the reset: reported, and the
    next run finishes the job once the client is gone."""
    client = subprocess.Popen(["sleep", "120"])
    try:
        mig_node.sh("gpu-sim", "client", "--name", "monitor", "--pid", str(client.pid), check=True)
        failed = mig_node.apply(A)
        assert failed.returncode == 1
        out = failed.stdout
        assert "GPU 0: MIG mode change is pending and the GPU reset failed" in out
        assert "reboot the node (or set driver.reboot: allowed)" in out
        assert "state reached: GPU 0: MIG enable pending; GPU 1: MIG disabled" in out
        assert mig_node.mode(0) == "Disabled, Enabled"
        plan = mig_node.apply(A, command="plan").stdout.splitlines()
        assert plan[0] == "GPU 0: reset the GPU (MIG enable is pending)"
    finally:
        client.kill()
        client.wait()
    finished = mig_node.apply(A)
    assert finished.returncode == 0, finished.stdout
    assert "resetting the GPU" in finished.stdout
    assert mig_node.lgi(0) == BALANCED


def test_layout_back_after_reboot(mig_node: MigNode) -> None:
    assert mig_node.apply(A).returncode == 0
    mig_node.reboot()
    assert mig_node.mode(0) == "Disabled, Disabled", "Hopper loses MIG mode at reboot"
    boot = mig_node.apply(A, command="boot")
    assert boot.returncode == 0, boot.stdout
    assert mig_node.lgi(0) == BALANCED
    assert mig_node.lgi(1) == ["7g.141gb@0:8"]
    assert "restart the device plugin" not in boot.stdout


def test_disable_tears_down_and_turns_mig_off(mig_node: MigNode) -> None:
    assert mig_node.apply(A).returncode == 0
    off = mig_node.apply(doc(None, {"7g.141gb": 1}, enabled=False))
    assert off.returncode == 0, off.stdout
    assert mig_node.mode(0) == "Disabled, Disabled"
    assert mig_node.lgi(1) == ["7g.141gb@0:8"]


def test_layout_that_does_not_fit_is_refused(mig_node: MigNode) -> None:
    result = mig_node.apply(doc({"4g.71gb": 1, "3g.71gb": 2}))
    assert result.returncode == 1
    assert "does not fit this GPU's MIG profiles" in result.stdout
    assert mig_node.mode(0) == "Disabled, Disabled"


def test_pending_mode_reboots_when_allowed(mig_node: MigNode) -> None:
    client = subprocess.Popen(["sleep", "120"])
    try:
        mig_node.sh("gpu-sim", "client", "--name", "monitor", "--pid", str(client.pid), check=True)
        result = mig_node.apply(A, "--reboot-allowed")
    finally:
        client.kill()
        client.wait()
    assert result.returncode == 3, result.stdout
    assert "MIG mode change pending and the reset failed" in result.stdout
    assert "rebooting (the boot unit applies the layout)" in result.stdout
    assert mig_node.service_log()[-1] == "reboot"


def test_driver_placing_elsewhere_is_reported(mig_node: MigNode) -> None:
    """A driver that ignores the ':start' placement (here: a wrapper dropping it before the simulator sees it) puts
    2g.35gb where it likes; the applier reads -lgi back and says so instead of reporting success."""
    wrapper = mig_node.root / "bin" / "nvidia-smi"
    real = wrapper.read_text().replace('"$@"', "$args")
    wrapper.write_text("#!/bin/sh\nargs=$(printf '%s\\n' \"$@\" | sed 's/^\\([0-9a-z.+]*\\):[0-9]*$/\\1/' | "
                       "tr '\\n' ' ')\n" + real.split("\n", 1)[1])
    result = mig_node.apply(A)
    assert result.returncode == 1, result.stdout
    assert "the GPUs differ from the layout after applying it" in result.stdout
    assert "state reached: GPU 0: " in result.stdout
    assert mig_node.lgi(0) != BALANCED


def test_layout_for_other_gpus_is_said(mig_node: MigNode) -> None:
    other = {"version": "v1", "mig-configs": {"a100": [
        {"device-filter": ["0x20B210DE"], "devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}}
    result = mig_node.apply(other)
    assert result.returncode == 0
    assert "the layout file selects none of this node's GPUs (0x233510DE); nothing to do" in result.stdout
    assert mig_node.mode(0) == "Disabled, Disabled"
