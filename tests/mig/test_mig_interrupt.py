"""An interrupted MIG apply never leaves GPU-holding units down: real applier processes on simulated H200s, held
at a known step (the stand-in ``nvidia-smi`` waits at a gate before creating the first GPU instance, after the
holders were stopped and MIG mode enabled) and then sent SIGTERM or SIGHUP, cut off from their output, or killed
with SIGKILL (the next run and the boot unit finish the job from the record)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from migsim import Gate, MigNode
from test_mig_applier import BALANCED, A

UNITS = ("nvidia-dcgm.service", "kubelet.service", "nvidia-persistenced.service")
STOP = "stop kubelet.service nvidia-dcgm.service nvidia-persistenced.service"
START = "start nvidia-persistenced.service nvidia-dcgm.service kubelet.service"


def held_apply(node: MigNode, *extra: str, stderr: int | None = subprocess.PIPE) -> tuple[subprocess.Popen[str], Gate]:
    """Start ``apply`` of layout A with the holder units running, and wait until it is held at the gate."""
    node.start_units(*UNITS)
    gate = node.gate("-cgi")
    layout = node.root / "mig-layout.yaml"
    layout.write_text(json.dumps(A))
    proc = subprocess.Popen([*node.applier, "apply", "--layout", str(layout), *extra], env=node.env,
                            stdout=subprocess.PIPE, stderr=stderr, text=True, start_new_session=True)
    gate.wait(proc)
    assert node.service_log() == [STOP]
    assert json.loads(node.record.read_text())["units"] == ["kubelet.service", "nvidia-dcgm.service",
                                                            "nvidia-persistenced.service"]
    return proc, gate


def units_active(node: MigNode) -> list[str]:
    return node.sh("systemctl", "is-active", *UNITS).stdout.split()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_signal_unwinds_through_the_restarts(mig_node: MigNode, signum: int) -> None:
    proc, gate = held_apply(mig_node)
    try:
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    finally:
        gate.open()
    assert proc.returncode == 1, out + err
    assert f"interrupted by {signal.Signals(signum).name}" in out
    assert "a later run finishes the layout" in out
    assert "Traceback" not in err
    assert mig_node.service_log() == [STOP, START]
    assert units_active(mig_node) == ["active"] * 3
    assert not mig_node.record.exists()
    finished = mig_node.apply(A)
    assert finished.returncode == 0, finished.stdout
    assert mig_node.lgi(0) == BALANCED


def test_closed_output_does_not_stop_the_apply(mig_node: MigNode) -> None:
    """The SSH channel goes away: stdout is a closed pipe; the apply carries on (progress on stderr) to the end."""
    proc, gate = held_apply(mig_node)
    assert proc.stdout is not None
    proc.stdout.close()
    gate.open()
    # Not communicate(): it would use the closed stdout (and under gevent's patched subprocess it fails on it).
    proc.wait(timeout=120)
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert "gpu-provision-mig: applied: GPU 0: " in err
    assert mig_node.lgi(0) == BALANCED
    assert mig_node.service_log() == [STOP, START]
    assert units_active(mig_node) == ["active"] * 3
    assert not mig_node.record.exists()


def killed_apply(node: MigNode) -> None:
    """``kill -9`` of the applier (and the command it was running) while it is held at the gate."""
    proc, gate = held_apply(node)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    gate.open()
    assert proc.returncode == -signal.SIGKILL
    assert node.service_log() == [STOP], "nothing runs after kill -9"
    assert units_active(node) == ["inactive"] * 3
    assert node.record.exists()


def test_killed_apply_is_finished_by_the_next_run(mig_node: MigNode) -> None:
    killed_apply(mig_node)
    plan = mig_node.apply(A, command="plan")
    assert plan.stdout.splitlines()[-1] == ("bring back kubelet.service, nvidia-dcgm.service, "
                                            "nvidia-persistenced.service (an interrupted apply left it down)")
    again = mig_node.apply(A)
    assert again.returncode == 0, again.stdout
    assert "an earlier apply was interrupted with kubelet.service, nvidia-dcgm.service" in again.stdout
    assert mig_node.lgi(0) == BALANCED
    assert mig_node.lgi(1) == ["7g.141gb@0:8"]
    assert mig_node.service_log()[-1] == START, "recorded units start although none was active"
    assert units_active(mig_node) == ["active"] * 3
    assert not mig_node.record.exists()
    assert "interrupted" not in mig_node.apply(A).stdout


def test_killed_apply_is_finished_by_the_boot_unit(mig_node: MigNode) -> None:
    killed_apply(mig_node)
    mig_node.reboot()
    boot = mig_node.apply(A, command="boot")
    assert boot.returncode == 0, boot.stdout
    assert mig_node.lgi(0) == BALANCED
    # At boot the starts are queued: the boot unit runs before kubelet and DCGM and must not wait for them.
    assert mig_node.service_log()[-1] == "start --no-block " + START.split(" ", 1)[1]
    assert units_active(mig_node) == ["active"] * 3
    assert not mig_node.record.exists()


def test_record_left_with_the_layout_in_place_starts_the_units(mig_node: MigNode) -> None:
    """Killed after the layout was complete but before the restarts: nothing to change, the units still come back."""
    assert mig_node.apply(A).returncode == 0
    mig_node.record.parent.mkdir(parents=True, exist_ok=True)
    mig_node.record.write_text(json.dumps({"units": ["nvidia-dcgm.service"], "modules": []}))
    result = mig_node.apply(A)
    assert result.returncode == 0, result.stdout
    assert "every GPU has its layout" in result.stdout
    assert mig_node.service_log() == ["start nvidia-dcgm.service"]
    assert not mig_node.record.exists()


def test_display_modules_blocking_the_reset_are_named(mig_node: MigNode) -> None:
    mig_node.sh("modprobe", "nvidia_drm", check=True)
    result = mig_node.apply(A, *mig_node.module_args)
    assert result.returncode == 1, result.stdout
    assert ("kernel module(s) nvidia_drm (use count 0), nvidia_modeset (use count 1: nvidia_drm) hold the GPU: "
            "set mig.allow_module_unload: true to unload them for the reset") in result.stdout
    assert mig_node.mode(0) == "Disabled, Enabled"
    assert mig_node.modules() == ["nvidia", "nvidia_modeset", "nvidia_drm"]


def test_display_modules_unloaded_for_the_reset_when_allowed(mig_node: MigNode) -> None:
    mig_node.sh("modprobe", "nvidia_drm", check=True)
    result = mig_node.apply(A, *mig_node.module_args, "--allow-module-unload")
    assert result.returncode == 0, result.stdout
    assert "unload kernel module(s) nvidia_drm, nvidia_modeset for the GPU reset" in result.stdout
    assert mig_node.lgi(0) == BALANCED
    assert sorted(mig_node.modules()) == ["nvidia", "nvidia_drm", "nvidia_modeset"], "loaded again afterwards"
    assert not mig_node.record.exists()


def test_module_in_use_is_refused_and_kept(mig_node: MigNode) -> None:
    mig_node.sh("modprobe", "nvidia_drm", check=True)
    modules = Path(mig_node.env["MODPROBE_PROCFS"]) / "modules"
    modules.write_text(modules.read_text().replace("nvidia_drm 1000 0", "nvidia_drm 1000 2"))
    result = mig_node.apply(A, *mig_node.module_args, "--allow-module-unload")
    assert result.returncode == 1, result.stdout
    assert "kernel module(s) nvidia_drm (use count 2), nvidia_modeset (use count 1: nvidia_drm) unloaded and " \
           "'modprobe -r' failed: modprobe: FATAL: Module nvidia_drm is in use." in result.stdout
    assert mig_node.modules() == ["nvidia", "nvidia_modeset", "nvidia_drm"]
    assert not mig_node.record.exists()
