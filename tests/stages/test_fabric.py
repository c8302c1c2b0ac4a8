"""Fabric Manager, NSCQ and NVLSM from the node's PCI bus (NVSwitches as PCI functions up to the third generation;
NVLink 5 management bridges on HGX B200/B300): the decision table, preflight's mismatch messages and what the
driver stage renders with and without them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from nodestates import fresh

from gpu_provision.desired import PackageWant, UnitWant
from gpu_provision.spec import load_cluster
from gpu_provision.spec.model import Node
from gpu_provision.stages import driver, fabric, preflight
from gpu_provision.state import NodeStateData

CLUSTER = load_cluster(str(Path(__file__).resolve().parents[2] / "inventory" / "cluster.yaml"))
H200 = CLUSTER.node("h200-01")


def _node(model: str = "H200", forced: bool | str = "auto") -> Node:
    return replace(H200, gpus=replace(H200.gpus, model=model), driver=replace(H200.driver, fabric_manager=forced))


def _state(os_key: str = "debian12", nvswitches: int = 0, bridges: int = 0) -> NodeStateData:
    return NodeStateData(fresh(os_key, gpus=8, nvswitches=nvswitches, bridges=bridges))


def _packages(node: Node, state: NodeStateData) -> dict[str, tuple[str | None, bool]]:
    return {w.name: (w.version, w.held) for w in driver.package_wants(node, state)}


@pytest.mark.parametrize(("forced", "nvswitches", "bridges", "expected"), [
    ("auto", 4, 0, (True, False)),    # HGX H100/H200: NVSwitches on the bus
    ("auto", 0, 4, (True, True)),     # HGX B200/B300: no NVSwitch on the bus, NVLink 5 bridges to them
    ("auto", 0, 0, (False, False)),   # PCIe or NVL cards (H200 NVL, H100 PCIe/NVL): Fabric Manager could not start
    (True, 0, 0, (True, False)),      # forced on (preflight names the mismatch)
    (False, 4, 0, (False, False)),    # forced off (preflight names the mismatch)
    (False, 0, 4, (False, False)),
    (True, 4, 0, (True, False)),
    (True, 0, 4, (True, True)),
    (False, 0, 0, (False, False)),
])
def test_decision_table(forced: bool | str, nvswitches: int, bridges: int, expected: tuple[bool, bool]) -> None:
    decided = fabric.decide(_node(forced=forced), _state(nvswitches=nvswitches, bridges=bridges))
    assert (decided.fabric_manager, decided.nvlsm) == expected


def test_nvswitches_are_the_nvidia_functions_of_the_bridge_other_class() -> None:
    state = _state(nvswitches=2)
    assert fabric.nvswitches(state) == ["0000:05:00.0", "0000:06:00.0"]
    assert fabric.nvswitches(_state()) == []


def test_nvlsm_follows_the_board_not_the_model_name() -> None:
    """The bridges decide NVLSM: a B200 whose board shows them gets it; the model name alone does not."""
    assert fabric.decide(_node("B200"), _state(bridges=4)) == fabric.Fabric(fabric_manager=True, nvlsm=True)
    assert fabric.decide(_node("B200"), _state()) == fabric.Fabric(fabric_manager=False, nvlsm=False)
    assert fabric.decide(_node("B200"), _state(nvswitches=2)) == fabric.Fabric(fabric_manager=True, nvlsm=False)
    assert fabric.decide(_node("H200"), _state(nvswitches=4)) == fabric.Fabric(fabric_manager=True, nvlsm=False)
    assert fabric.nvlink5_bridges(_state(bridges=2)) == ["0000:a0:00.1", "0000:a1:00.1"]


def test_driver_stage_without_nvswitches_installs_and_enables_no_fabric() -> None:
    node, state = _node(), _state()
    assert _packages(node, state) == {"nvidia-open": ("580.*", True), "nvidia-driver": ("580.*", True),
                                      "nvidia-kernel-open-dkms": ("580.*", True)}
    assert driver.unit_wants(node, state) == [UnitWant("nvidia-persistenced.service")]


def test_driver_stage_with_nvswitches_installs_fabric_manager_and_nscq_at_the_drivers_version() -> None:
    node, state = _node(), _state(nvswitches=4)
    packages = _packages(node, state)
    assert packages["nvidia-fabricmanager"] == ("580.*", True) and packages["libnvidia-nscq"] == ("580.*", True)
    assert "nvlsm" not in packages
    assert driver.unit_wants(node, state) == [UnitWant("nvidia-persistenced.service"),
                                              UnitWant("nvidia-fabricmanager.service")]


def test_nvlink5_board_also_gets_nvlsm_and_the_infiniband_tools_at_their_own_versions() -> None:
    """NVLSM and infiniband-diags (with libibumad, its dependency): what NVIDIA's driver container installs for
    NVLink 5 boards (packages.json ``nvidia-fabric-manager-nvlink5``), from NVIDIA's CUDA repository."""
    wants = driver.package_wants(_node("B200"), _state("debian12", bridges=4))
    assert PackageWant("nvidia-fabricmanager", "580.*", held=True) in wants
    assert PackageWant("libnvidia-nscq", "580.*", held=True) in wants
    assert PackageWant("nvlsm") in wants and PackageWant("infiniband-diags") in wants
    assert driver.unit_wants(_node("B200"), _state("debian12", bridges=4))[-1] == UnitWant(
        "nvidia-fabricmanager.service")


def test_on_ubuntus_archive_nvlsm_must_be_there_before_the_deploy() -> None:
    """Ubuntu's archive carries nvidia-fabricmanager-580 and libnvidia-nscq-580 (multiverse) but no nvlsm
    (packages.ubuntu.com): the deploy installs what the archive has, and preflight stops an NVLink 5 node until
    nvlsm is installed, rather than let apt fail on a name it cannot find."""
    wants = driver.package_wants(_node("B200"), _state("ubuntu2404", bridges=4))
    assert PackageWant("nvidia-fabricmanager-580", None, held=True) in wants
    assert PackageWant("libnvidia-nscq-580", None, held=True) in wants
    assert PackageWant("infiniband-diags") in wants and not any(w.name == "nvlsm" for w in wants)
    raw = fresh("ubuntu2404", gpus=8, device="0x2901", bridges=4)
    found = _findings(_node("B200"), raw)
    assert found == {("fabric-manager", True): (
        "this NVLink 5 board needs NVLSM (nvlsm) beside Fabric Manager, and the driver here comes from the "
        "distribution's archive, which has no nvlsm package: install nvlsm from NVIDIA's CUDA repository first "
        "(NVIDIA's driver container takes it from there), then deploy again")}
    raw["packages"]["packages"]["nvlsm"] = {"version": "2025.06.5-1", "held": False}
    assert _findings(_node("B200"), raw) == {}
    # Boards with NVSwitches on the bus need no NVLSM, on Ubuntu too.
    assert _findings(_node(), fresh("ubuntu2404", gpus=8, nvswitches=4)) == {}


def test_nvlink5_board_loads_ib_umad_now_and_at_boot_and_drift_names_it_unloaded() -> None:
    """NVIDIA's driver container waits for ib_umad before it starts Fabric Manager and NVLSM on an NVLink 5 system
    (packages.json ``nvlink5_bridge.modules``); a board with NVSwitches on the bus (no NVLSM) needs none."""
    node, state = _node("B200"), _state("ubuntu2404", bridges=4)
    assert fabric.missing_modules(node, state) == ["ib_umad"]
    [want] = driver.module_file_wants(node, state)
    assert want.path == "/etc/modules-load.d/gpu-provision-nvlink5.conf" and want.content.endswith("\nib_umad\n")
    assert want in driver.wants(node, CLUSTER, state)
    [found] = driver.extra_differences(node, CLUSTER, state)
    assert (found.kind, found.item, found.actual, found.source) == ("module", "ib_umad", "not loaded", "/proc/modules")
    raw = fresh("ubuntu2404", gpus=8, bridges=4, modules=("ib_umad",))
    assert fabric.missing_modules(node, NodeStateData(raw)) == []
    assert driver.extra_differences(node, CLUSTER, NodeStateData(raw)) == []
    raw = fresh("ubuntu2404", gpus=8, bridges=4)
    raw["files"]["/sys/module/ib_umad"] = {"exists": True, "type": "directory"}  # built into the kernel
    assert fabric.missing_modules(node, NodeStateData(raw)) == []
    for other in (_state("ubuntu2404", nvswitches=4), _state("ubuntu2404")):
        assert driver.module_file_wants(_node("H200"), other) == [] and fabric.missing_modules(_node("H200"), other) == []
    asked = driver.request(node, CLUSTER).files
    assert {"/etc/modules-load.d/gpu-provision-nvlink5.conf", "/sys/module/ib_umad"} <= asked


def test_the_probe_is_asked_about_every_fabric_package() -> None:
    asked = driver.request(_node(), CLUSTER).packages
    assert {"nvidia-fabricmanager", "libnvidia-nscq", "nvidia-fabricmanager-580", "libnvidia-nscq-580",
            "nvlsm", "infiniband-diags"} <= asked


def _findings(node: Node, raw: dict[str, Any]) -> dict[tuple[str, bool], str]:
    return {(f.check, f.fatal): f.message for f in preflight.findings(node, CLUSTER, NodeStateData(raw))}


def test_preflight_names_fabric_manager_forced_on_without_an_nvswitch() -> None:
    found = _findings(_node(forced=True), fresh("debian12", gpus=8))
    assert found == {("fabric-manager", True): (
        "driver.fabric_manager is true but the node has no NVSwitch (no PCI function of vendor 0x10de and class "
        "0x068000, and no NVLink 5 bridge: no function of vendor 0x15b3 with SW_MNG in its VPD): Fabric Manager "
        "cannot start without one; set it to auto or false")}


def test_preflight_names_nvswitches_with_fabric_manager_forced_off() -> None:
    found = _findings(_node(forced=False), fresh("debian12", gpus=8, nvswitches=2))
    assert found == {("fabric-manager", True): (
        "driver.fabric_manager is false but the node has 2 NVSwitch(es) or NVLink 5 bridge(s) (0000:05:00.0, "
        "0000:06:00.0): their GPUs stay unusable for CUDA without Fabric Manager; set it to auto or true")}


def test_preflight_warns_of_an_nvlink5_model_on_a_board_without_bridges() -> None:
    """A B200 file on a board whose NVSwitches are PCI functions (or whose bridges the host cannot read): a warning,
    since Fabric Manager is installed without NVLSM; nothing is said where the board shows its bridges."""
    found = _findings(_node("B200"), fresh("debian12", gpus=8, device="0x2901", nvswitches=2))
    assert found == {("fabric-manager", False): (
        "the file says B200, whose HGX baseboards reach their NVSwitches through NVLink 5 bridges, but the node shows "
        "none (no PCI function of vendor 0x15b3 with SW_MNG in its VPD): NVLSM is left out, and Fabric Manager "
        "cannot route such a board without it")}
    assert _findings(_node("B200"), fresh("debian12", gpus=8, device="0x2901", bridges=4)) == {}


def test_preflight_passes_auto_and_agreeing_forced_values() -> None:
    assert _findings(_node(), fresh("debian12", gpus=8)) == {}
    assert _findings(_node(), fresh("debian12", gpus=8, nvswitches=4)) == {}
    assert _findings(_node(forced=True), fresh("debian12", gpus=8, nvswitches=4)) == {}
    assert _findings(_node(forced=False), fresh("debian12", gpus=8)) == {}
    assert _findings(_node(forced=True), fresh("debian12", gpus=8, bridges=4)) == {}


def test_a_preinstalled_driver_is_not_checked_for_the_fabric() -> None:
    node = _node(forced=True)
    node = replace(node, driver=replace(node.driver, install_method="preinstalled"))
    assert ("fabric-manager", True) not in _findings(node, fresh("debian12", gpus=8))
