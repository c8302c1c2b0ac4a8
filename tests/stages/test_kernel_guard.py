"""The kernel guard in the stages: preflight warns, drift reports, the driver stage fails the node instead of
rebooting it, the MIG applier loses its permission to reboot; and driver.hold_kernel's held packages."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from fakehost import FakeHost, run_op
from nodestates import fresh, with_file

from gpu_provision.desired import PackageWant
from gpu_provision.mig import install as agent_mig
from gpu_provision.operations import commands
from gpu_provision.spec import load_cluster
from gpu_provision.stages import driver, mig, preflight
from gpu_provision.state import NodeStateData

CLUSTER = load_cluster(str(Path(__file__).resolve().parents[2] / "inventory" / "cluster.yaml"))
H200 = CLUSTER.node("h200-01")
REBOOTS = replace(H200, driver=replace(H200.driver, reboot="allowed"))
RUNNING, PENDING = "6.8.0-45-generic", "6.8.0-47-generic"
GUARD = ("kernel 6.8.0-47-generic is installed but has no NVIDIA modules; a reboot would leave the node without a "
         "GPU driver")


def ubuntu(pending_modules: str | None = None, **kwargs: Any) -> dict[str, Any]:
    """An Ubuntu node whose driver runs on 6.8.0-45 (DKMS) with 6.8.0-47 installed beside it."""
    raw = fresh("ubuntu2404", gpus=8, **kwargs)
    raw["system"]["nvidia_modules"] = {RUNNING: "dkms", PENDING: pending_modules}
    return raw


def needs_driver_reboot(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with nouveau loaded and blacklisted: the driver stage wants a reboot."""
    raw["system"]["modules"] = ["nouveau"]
    return with_file(raw, driver.BLACKLIST, driver.BLACKLIST_TEXT)


def test_preflight_warns_and_drift_reports_but_the_node_is_not_stopped() -> None:
    state = NodeStateData(ubuntu())
    found = preflight.findings(H200, CLUSTER, state)
    assert [(f.check, f.fatal, f.message) for f in found] == [("kernel-guard", False, GUARD)]
    differences = preflight.extra_differences(H200, CLUSTER, state)
    assert [(d.kind, d.item, d.actual, d.stage) for d in differences] == [
        ("preflight", "kernel-guard", GUARD, "preflight")]


def test_modules_for_the_pending_kernel_clear_the_guard() -> None:
    state = NodeStateData(ubuntu("dkms"))
    assert preflight.findings(H200, CLUSTER, state) == []
    assert preflight.extra_differences(H200, CLUSTER, state) == []


def test_precompiled_modules_need_no_headers_but_dkms_ones_do() -> None:
    raw = ubuntu("dkms")
    raw["system"]["headers"][PENDING] = False
    raw["runtime"]["headers_available"] = [f"linux-headers-{PENDING}"]
    checks = {f.check: f for f in preflight.findings(H200, CLUSTER, NodeStateData(raw))}
    assert checks["kernel-guard"].message.startswith(f"kernel {PENDING} is installed but has no headers")
    signed = ubuntu("package", secure_boot="enabled")
    signed["system"]["headers"][PENDING] = False
    signed["runtime"]["precompiled_modules"] = [f"linux-modules-nvidia-580-server-open-{k}" for k in (RUNNING, PENDING)]
    assert preflight.findings(H200, CLUSTER, NodeStateData(signed)) == []


def test_the_driver_stage_refuses_a_reboot_the_guard_blocks() -> None:
    blocked = NodeStateData(needs_driver_reboot(ubuntu()))
    assert driver.reboot_refused(REBOOTS, blocked) == GUARD
    # No reboot needed, or a pending kernel with modules: nothing to refuse.
    assert driver.reboot_refused(REBOOTS, NodeStateData(ubuntu())) is None
    assert driver.reboot_refused(REBOOTS, NodeStateData(needs_driver_reboot(ubuntu("dkms")))) is None


def test_the_guard_operation_fails_the_node_with_the_reason() -> None:
    def op(raw: dict[str, Any]) -> list[Any]:
        return run_op(commands.guarded, FakeHost(raw),
                      lambda s: commands.fail_command(f"not rebooting: {driver.reboot_refused(REBOOTS, s)}"),
                      lambda s: driver.reboot_refused(REBOOTS, s), driver.request(REBOOTS, CLUSTER),
                      "no kernel stands in the way")

    assert op(needs_driver_reboot(ubuntu())) == [commands.fail_command(f"not rebooting: {GUARD}")]
    assert op(needs_driver_reboot(ubuntu("dkms"))) == []


def test_the_rollout_defers_a_guarded_reboot_until_after_the_change_and_fails_only_then() -> None:
    blocked = NodeStateData(needs_driver_reboot(ubuntu()))
    assert driver.reboot_step(REBOOTS, blocked, before_change=True) == driver.RebootStep()
    assert driver.reboot_step(REBOOTS, blocked) == driver.RebootStep(refused=f"not rebooting: {GUARD}")
    # The change built the pending kernel's module: the reboot is taken.
    built = NodeStateData(needs_driver_reboot(ubuntu("dkms")))
    for before in (True, False):
        assert driver.reboot_step(REBOOTS, built, before_change=before) == driver.RebootStep(
            reboot="nouveau is loaded; it is blacklisted from the next boot on")
    # A node that may not reboot fails at once; one that needs no reboot has no step.
    assert driver.reboot_step(H200, built, before_change=True).refused == (
        "a reboot is needed (nouveau is loaded; it is blacklisted from the next boot on) and driver.reboot is not "
        "'allowed'")
    assert driver.reboot_step(REBOOTS, NodeStateData(ubuntu()), before_change=True) == driver.RebootStep()
    assert driver.reboot_step(REBOOTS, NodeStateData(ubuntu())) == driver.RebootStep()


def test_the_mig_applier_may_not_reboot_while_the_guard_blocks() -> None:
    blocked, clear = NodeStateData(ubuntu()), NodeStateData(ubuntu("dkms"))
    assert "--reboot-allowed" in agent_mig.flags(mig.reboot_guarded(REBOOTS, clear))
    guarded = mig.reboot_guarded(REBOOTS, blocked)
    assert guarded.driver.reboot == "never" and "--reboot-allowed" not in agent_mig.flags(guarded)
    assert guarded.mig == REBOOTS.mig
    assert mig.reboot_guarded(H200, blocked) is H200  # reboot: never already
    assert mig.reboot_refused(REBOOTS, blocked) == GUARD
    assert mig.reboot_refused(REBOOTS, clear) is None and mig.reboot_refused(H200, blocked) is None


def test_hold_kernel_holds_the_running_kernels_metapackages() -> None:
    held = replace(H200, driver=replace(H200.driver, hold_kernel=True))
    wants = driver.package_wants(held, NodeStateData(fresh("ubuntu2404", gpus=8)))
    assert [w for w in wants if w.name.startswith("linux-")] == [
        PackageWant("linux-image-generic", held=True), PackageWant("linux-headers-generic", held=True)]
    debian = driver.kernel_hold_wants(held, NodeStateData(fresh("debian12", gpus=8)))
    assert [w.name for w in debian] == ["linux-image-amd64", "linux-headers-amd64"]
    rocky = driver.kernel_hold_wants(held, NodeStateData(fresh("rocky9", gpus=8)))
    assert rocky == [PackageWant(n, held=True) for n in ("kernel", "kernel-core", "kernel-devel")]
    assert driver.kernel_hold_wants(H200, NodeStateData(fresh("ubuntu2404", gpus=8))) == []
    assert not H200.driver.hold_kernel
