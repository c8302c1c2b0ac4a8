"""vGPU on an SR-IOV H200: the sysfs reader on a tree in the driver's layout, the step plan, and the applier writing
type IDs looked up by name into ``current_vgpu_type``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from migsim import MigNode

from gpu_provision.node.mig import nvsmi, vgpu
from gpu_provision.node.probe import mig as probe

TREE = Path(__file__).resolve().parent / "fixtures" / "sysfs-h200-vgpu"
PF = "0000:41:00.0"
VFS = [f"0000:41:00.{n}" for n in range(4, 8)]
GPU = {"index": 0, "uuid": "GPU-7a01bbbc-8780-9e2b-9ffe-56c5caa0e387", "bus_id": "00000000:41:00.0",
       "pci_device_id": "0x233510DE", "name": "NVIDIA H200", "mig_current": False, "mig_pending": False}


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """A writable copy of the fixture tree."""
    root = tmp_path / "vgpu-sys"  # the simulated node keeps its kernel's /sys at tmp_path / "sys"
    shutil.copytree(TREE, root, symlinks=True)
    return root


def current(root: Path, vf: str) -> str:
    return (root / "bus" / "pci" / "devices" / vf / "nvidia" / "current_vgpu_type").read_text().strip()


def snapshot(root: Path, known: dict | None = None) -> dict:
    return {"gpus": [GPU], "vgpu": probe.read_vgpu(str(root), [PF]), "vgpu_known_types": known or {}}


def test_reader_follows_virtfn_links(sysfs: Path) -> None:
    pf = probe.read_vgpu(str(sysfs), [PF])[PF]
    assert pf["sriov_totalvfs"] == 4 and pf["sriov_numvfs"] == 4
    assert [vf["address"] for vf in pf["vfs"]] == VFS
    assert pf["vfs"][0]["creatable"] == {"NVIDIA H200X-141C": 1428, "NVIDIA H200X-1-18C": 1414}
    assert all(vf["current"] == 0 for vf in pf["vfs"])
    assert nvsmi.sysfs_address("00000000:41:00.0") == PF


def test_plan_assigns_the_id_looked_up_by_name(sysfs: Path) -> None:
    steps = vgpu.plan_vgpu({0: "NVIDIA H200X-141C"}, snapshot(sysfs))
    assert steps == [vgpu.VgpuAction("assign", 0, VFS[0], type_id=1428, type_name="NVIDIA H200X-141C")]
    assert str(steps[0]) == "GPU 0: create NVIDIA H200X-141C (type 1428) on VF 0000:41:00.4"


def test_type_the_gpu_does_not_offer_is_refused(sysfs: Path) -> None:
    steps = vgpu.plan_vgpu({0: "NVIDIA H100XM-40C"}, snapshot(sysfs))
    assert [s.kind for s in steps] == ["refuse"]
    assert "'NVIDIA H100XM-40C' is not a vGPU type this GPU offers (offered: NVIDIA H200X-1-18C, " \
           "NVIDIA H200X-141C)" in str(steps[0])


def test_virtual_functions_enabled_first(sysfs: Path) -> None:
    pf_dir = sysfs / "bus" / "pci" / "devices" / PF
    (pf_dir / "sriov_numvfs").write_text("0\n")
    for link in pf_dir.glob("virtfn*"):
        link.unlink()
    steps = vgpu.plan_vgpu({0: "NVIDIA H200X-141C"}, snapshot(sysfs))
    assert steps == [vgpu.VgpuAction("enable-vfs", 0, PF)]
    assert str(steps[0]) == "GPU 0: enable the virtual functions of 0000:41:00.0 (/usr/lib/nvidia/sriov-manage -e)"


def test_no_sriov_is_refused(sysfs: Path) -> None:
    (sysfs / "bus" / "pci" / "devices" / PF / "sriov_totalvfs").unlink()
    steps = vgpu.plan_vgpu({0: "NVIDIA H200X-141C"}, snapshot(sysfs))
    assert [s.kind for s in steps] == ["refuse"] and "offers no SR-IOV virtual functions" in steps[0].reason


def test_other_type_is_cleared_and_converged_state_is_quiet(sysfs: Path) -> None:
    devices = sysfs / "bus" / "pci" / "devices"
    # VF .4 holds the wanted type, .5 another one; the driver empties the lists of VFs that hold a vGPU and, with
    # the GPU's framebuffer taken, no VF offers the full-size type any more.
    for vf, cur in zip(VFS, ("1428", "1414", "0", "0")):
        (devices / vf / "nvidia" / "current_vgpu_type").write_text(cur + "\n")
        (devices / vf / "nvidia" / "creatable_vgpu_types").write_text("")
    known = {"NVIDIA H200X-141C": 1428, "NVIDIA H200X-1-18C": 1414}
    steps = vgpu.plan_vgpu({0: "NVIDIA H200X-141C"}, snapshot(sysfs, known))
    assert steps == [vgpu.VgpuAction("clear", 0, VFS[1], type_id=1414)]
    (devices / VFS[1] / "nvidia" / "current_vgpu_type").write_text("0\n")
    assert vgpu.plan_vgpu({0: "NVIDIA H200X-141C"}, snapshot(sysfs, known)) == []
    assert vgpu.held(snapshot(sysfs, known)["vgpu"][PF], known) == ["NVIDIA H200X-141C"]


def test_applier_writes_type_ids(mig_node: MigNode, sysfs: Path) -> None:
    """The installed applier on a simulated H200 at 41:00.0: every free VF that offers the type gets its ID (this
    static tree does not shrink the lists the way the driver does, so all four take it), then nothing is left."""
    (mig_node.root / "gpus.json").write_text(json.dumps({"gpus": [
        {"model": "H200", "index": 0, "uuid": GPU["uuid"], "pci_bus_id": "00000000:41:00.0", "serial": "1"}]}))
    types = mig_node.root / "vgpu.json"
    types.write_text(json.dumps({"gpus": {"0": "NVIDIA H200X-141C"}}))
    state = mig_node.root / "vgpu-types.json"
    common = ["--vgpu", str(types), "--sysfs", str(sysfs), "--vgpu-state", str(state)]
    plan = mig_node.sh(*mig_node.applier, "plan", *common, check=True)
    assert plan.stdout.strip() == "GPU 0: create NVIDIA H200X-141C (type 1428) on VF 0000:41:00.4"
    result = mig_node.sh(*mig_node.applier, "vgpu", *common)
    assert result.returncode == 0, result.stdout
    assert [current(sysfs, vf) for vf in VFS] == ["1428"] * 4
    assert json.loads(state.read_text())["NVIDIA H200X-141C"] == 1428
    again = mig_node.sh(*mig_node.applier, "vgpu", *common, check=True)
    assert "vGPU types in place (0 change(s))" in again.stdout


def test_applier_refuses_unknown_type(mig_node: MigNode, sysfs: Path) -> None:
    (mig_node.root / "gpus.json").write_text(json.dumps({"gpus": [
        {"model": "H200", "index": 0, "uuid": GPU["uuid"], "pci_bus_id": "00000000:41:00.0", "serial": "1"}]}))
    types = mig_node.root / "vgpu.json"
    types.write_text(json.dumps({"gpus": {"0": "NVIDIA H200X-70C"}}))
    result = mig_node.sh(*mig_node.applier, "vgpu", "--vgpu", str(types), "--sysfs", str(sysfs),
                         "--vgpu-state", str(mig_node.root / "t.json"))
    assert result.returncode == 1
    assert "'NVIDIA H200X-70C' is not a vGPU type this GPU offers" in result.stdout
    assert [current(sysfs, vf) for vf in VFS] == ["0"] * 4
