"""Fabric Manager, NSCQ and NVLSM from the node's PCI bus: the decision table, preflight's mismatch messages and
what the driver stage renders with and without them."""

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


def _state(os_key: str = "debian12", nvswitches: int = 0) -> NodeStateData:
    return NodeStateData(fresh(os_key, gpus=8, nvswitches=nvswitches))


def _packages(node: Node, state: NodeStateData) -> dict[str, tuple[str | None, bool]]:
    return {w.name: (w.version, w.held) for w in driver.package_wants(node, state)}


@pytest.mark.parametrize(("forced", "nvswitches", "expected"), [
    ("auto", 4, True),     # HGX board: NVSwitches on the bus
    ("auto", 0, False),    # PCIe or NVL cards (H200 NVL, H100 PCIe/NVL): Fabric Manager could not start
    (True, 0, True),       # forced on (preflight names the mismatch)
    (False, 4, False),     # forced off (preflight names the mismatch)
    (True, 4, True),
    (False, 0, False),
])
def test_decision_table(forced: bool | str, nvswitches: int, expected: bool) -> None:
    assert fabric.decide(_node(forced=forced), _state(nvswitches=nvswitches)).fabric_manager is expected


def test_nvswitches_are_the_nvidia_functions_of_the_bridge_other_class() -> None:
    state = _state(nvswitches=2)
    assert fabric.nvswitches(state) == ["0000:05:00.0", "0000:06:00.0"]
    assert fabric.nvswitches(_state()) == []


def test_nvlsm_only_with_fabric_manager_on_a_model_whose_data_says_so() -> None:
    assert fabric.decide(_node("B200"), _state(nvswitches=2)) == fabric.Fabric(fabric_manager=True, nvlsm=True)
    assert fabric.decide(_node("B200"), _state()) == fabric.Fabric(fabric_manager=False, nvlsm=False)
    assert fabric.decide(_node("H200"), _state(nvswitches=4)) == fabric.Fabric(fabric_manager=True, nvlsm=False)


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


def test_nvlink5_board_also_gets_nvlsm_at_its_own_version() -> None:
    wants = driver.package_wants(_node("B200"), _state("ubuntu2404", nvswitches=2))
    assert PackageWant("nvidia-fabricmanager-580", None, held=True) in wants
    assert PackageWant("libnvidia-nscq-580", None, held=True) in wants
    assert PackageWant("nvlsm") in wants


def test_the_probe_is_asked_about_every_fabric_package() -> None:
    asked = driver.request(_node(), CLUSTER).packages
    assert {"nvidia-fabricmanager", "libnvidia-nscq", "nvidia-fabricmanager-580", "libnvidia-nscq-580",
            "nvlsm"} <= asked


def _findings(node: Node, raw: dict[str, Any]) -> dict[tuple[str, bool], str]:
    return {(f.check, f.fatal): f.message for f in preflight.findings(node, CLUSTER, NodeStateData(raw))}


def test_preflight_names_fabric_manager_forced_on_without_an_nvswitch() -> None:
    found = _findings(_node(forced=True), fresh("debian12", gpus=8))
    assert found == {("fabric-manager", True): (
        "driver.fabric_manager is true but the node has no NVSwitch (no PCI function of vendor 0x10de and class "
        "0x068000): Fabric Manager cannot start without one; set it to auto or false")}


def test_preflight_names_nvswitches_with_fabric_manager_forced_off() -> None:
    found = _findings(_node(forced=False), fresh("debian12", gpus=8, nvswitches=2))
    assert found == {("fabric-manager", True): (
        "driver.fabric_manager is false but the node has 2 NVSwitch(es) (0000:05:00.0, 0000:06:00.0): their GPUs "
        "stay unusable for CUDA without Fabric Manager; set it to auto or true")}


def test_preflight_passes_auto_and_agreeing_forced_values() -> None:
    assert _findings(_node(), fresh("debian12", gpus=8)) == {}
    assert _findings(_node(), fresh("debian12", gpus=8, nvswitches=4)) == {}
    assert _findings(_node(forced=True), fresh("debian12", gpus=8, nvswitches=4)) == {}
    assert _findings(_node(forced=False), fresh("debian12", gpus=8)) == {}


def test_a_preinstalled_driver_is_not_checked_for_the_fabric() -> None:
    node = _node(forced=True)
    node = replace(node, driver=replace(node.driver, install_method="preinstalled"))
    assert ("fabric-manager", True) not in _findings(node, fresh("debian12", gpus=8))
