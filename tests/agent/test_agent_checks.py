"""Decisions of the agent's checks: readings parsed from real fixtures, varied one field at a time."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from gpu_provision.node.verify import checks, nvsmi
from gpu_provision.verify.expect import build_expectations


@pytest.fixture
def expect() -> dict[str, Any]:
    return build_expectations("n1", "H200", 1, driver_version="580", cuda_min="12.4",
                              device_permissions={"group": "video", "mode": "0660"}).to_dict()


@pytest.fixture
def gpu(fixtures: Path) -> dict[str, Any]:
    return nvsmi.parse_query_xml((fixtures / "h200" / "nvsmi_q.xml").read_text())["gpus"][0]


def test_driver_checks_on_real_version_file(fixtures: Path, expect: dict[str, Any]) -> None:
    proc = (fixtures / "h200" / "proc_driver_nvidia_version.txt").read_text()
    loaded, version = checks.driver_checks(proc, "580.159.04", expect)
    assert loaded.status == "pass" and version.status == "pass"
    assert version.measured == "580.159.04" and version.expected == "580"


@pytest.mark.parametrize(("actual", "pinned", "ok"), [
    ("580.159.04", "580", True), ("580.159.04", "580.159.04", True), ("580.159.04", "580.159", True),
    ("580.159.04", "58", False), ("580.159.04", "570", False), ("5800.1", "580", False),
])
def test_driver_pin(actual: str, pinned: str, ok: bool) -> None:
    assert checks.driver_matches(actual, pinned) is ok


def test_driver_user_space_and_module_differ(fixtures: Path, expect: dict[str, Any]) -> None:
    proc = (fixtures / "h200" / "proc_driver_nvidia_version.txt").read_text()
    _, version = checks.driver_checks(proc, "580.200.01", expect)
    assert version.status == "fail"
    assert version.measured == {"user_space": "580.200.01", "kernel_module": "580.159.04"}


def test_driver_unpinned_is_skip(expect: dict[str, Any]) -> None:
    expect["driver"] = None
    _, version = checks.driver_checks("NVRM version: ... Kernel Module  580.159.04  Release", "580.159.04", expect)
    assert version.status == "skip" and version.reason


@pytest.mark.parametrize(("cuda", "minimum", "status"), [("13.0", "12.4", "pass"), ("12.4", "12.4", "pass"),
                                                        ("12.2", "12.4", "fail"), ("13.0", "13.10", "fail")])
def test_cuda_minimum(expect: dict[str, Any], cuda: str, minimum: str, status: str) -> None:
    expect["cuda_min"] = minimum
    assert checks.cuda_version_check(cuda, expect, "xml").status == status


def test_cuda_version_unreadable_is_skip(expect: dict[str, Any]) -> None:
    check = checks.cuda_version_check(None, expect, "NVML not available")
    assert check.status == "skip" and "NVML not available" in check.reason


def test_model_wrong_gpu(gpu: dict[str, Any], expect: dict[str, Any]) -> None:
    assert checks.model_check(gpu, expect).status == "pass"
    other = dict(gpu, name="NVIDIA H100 80GB HBM3", pci_device_id="0x233010DE")
    check = checks.model_check(other, expect)
    assert check.status == "fail" and check.reason == "GPU is NVIDIA H100 80GB HBM3 (0x233010DE), not a H200"


def test_ecc_all_clear_on_fixture(gpu: dict[str, Any], expect: dict[str, Any]) -> None:
    mode, unc, remap, retired = checks.ecc_checks(gpu, expect)
    assert [mode.status, unc.status, remap.status, retired.status] == ["pass", "pass", "pass", "skip"]
    assert retired.reason.startswith("page retirement not reported")


@pytest.mark.parametrize(("change", "cid", "reason"), [
    ({"ecc_uncorrected_volatile": 2}, "gpu0.ecc.uncorrected", "2 uncorrected ECC error(s) since the driver loaded"),
    ({"ecc_current": False, "ecc_pending": False}, "gpu0.ecc.mode", "ECC is disabled, expected enabled"),
    ({"ecc_pending": False}, "gpu0.ecc.mode", "ECC mode change pending: takes effect after a GPU reset or reboot"),
    ({"remapped_rows": {"correctable": 0, "uncorrectable": 1, "pending": True, "failure": False}},
     "gpu0.ecc.remapped_rows", "row remapping pending: reset the GPU to apply it"),
    ({"remapped_rows": {"correctable": 0, "uncorrectable": 9, "pending": False, "failure": True}},
     "gpu0.ecc.remapped_rows", "row remapping failed: the GPU needs service"),
    ({"retired_pending": True, "retired_count": 4}, "gpu0.ecc.retired_pages",
     "retired pages pending: reset the GPU to apply the retirement"),
])
def test_ecc_faults(gpu: dict[str, Any], expect: dict[str, Any], change: dict[str, Any], cid: str,
                    reason: str) -> None:
    found = {c.id: c for c in checks.ecc_checks(dict(gpu, **change), expect)}
    assert found[cid].status == "fail" and found[cid].reason == reason
    assert [c.id for c in found.values() if c.status == "fail"] == [cid]


def test_pcie_downshift_recovered_under_load(gpu: dict[str, Any]) -> None:
    idle = dict(gpu, pcie_gen_current=1)
    assert [c.status for c in checks.pcie_checks(idle)] == ["fail", "pass"]
    gen, width = checks.pcie_checks(idle, relinked=(5, 16))
    assert gen.status == "pass" and gen.measured == 5


def test_pcie_narrow_link(gpu: dict[str, Any]) -> None:
    gen, width = checks.pcie_checks(dict(gpu, pcie_width_current=8), relinked=(5, 8))
    assert width.status == "fail" and width.reason == "PCIe link runs at x8, below its maximum x16"


def test_persistence(gpu: dict[str, Any], expect: dict[str, Any]) -> None:
    assert checks.persistence_check(gpu, expect).status == "pass"
    assert checks.persistence_check(dict(gpu, persistence_mode=False), expect).status == "fail"
    expect["persistence"] = False
    assert checks.persistence_check(dict(gpu, persistence_mode=False), expect).status == "pass"


def test_mig_pending_change(gpu: dict[str, Any], expect: dict[str, Any]) -> None:
    (mode,) = checks.mig_checks(dict(gpu, mig_pending=True), expect, [], [])
    assert mode.status == "fail" and mode.reason == "MIG mode change pending: reset the GPU to apply it"


def test_mig_layout_order_does_not_matter(gpu: dict[str, Any], expect: dict[str, Any]) -> None:
    expect["mig"] = {"0": [{"profile": "1g.18gb", "start": 6, "size": 1}, {"profile": "3g.71gb", "start": 0, "size": 4}]}
    lgi = [{"gpu": 0, "profile": "3g.71gb", "profile_id": 9, "instance_id": 2, "start": 0, "size": 4},
           {"gpu": 0, "profile": "1g.18gb", "profile_id": 19, "instance_id": 13, "start": 6, "size": 1},
           {"gpu": 1, "profile": "7g.141gb", "profile_id": 0, "instance_id": 0, "start": 0, "size": 8}]
    lci = [{"gpu": 0, "gpu_instance_id": 2}, {"gpu": 0, "gpu_instance_id": 13}]
    mode, layout, cis = checks.mig_checks(dict(gpu, mig_current=True, mig_pending=True), expect, lgi, lci)
    assert (mode.status, layout.status, cis.status) == ("pass", "pass", "pass")


def test_mig_layout_reported_in_start_order(gpu: dict[str, Any], expect: dict[str, Any]) -> None:
    """Wanted and found layouts are compared as GpuLayouts and shown as placement dicts in start order."""
    expect["mig"] = {"0": [{"profile": "1g.18gb", "start": 6, "size": 1}, {"profile": "3g.71gb", "start": 0, "size": 4}]}
    lgi = [{"gpu": 0, "profile": "1g.18gb", "profile_id": 19, "instance_id": 13, "start": 6, "size": 1},
           {"gpu": 0, "profile": "3g.71gb", "profile_id": 9, "instance_id": 2, "start": 0, "size": 4}]
    _, layout, _ = checks.mig_checks(dict(gpu, mig_current=True, mig_pending=True), expect, lgi, [])
    in_order = [{"profile": "3g.71gb", "start": 0, "size": 4}, {"profile": "1g.18gb", "start": 6, "size": 1}]
    assert layout.status == "pass" and layout.measured == layout.expected == in_order


def test_mig_same_profiles_other_placement_fails(gpu: dict[str, Any], expect: dict[str, Any]) -> None:
    expect["mig"] = {"0": [{"profile": "1g.18gb", "start": 6, "size": 1}]}
    lgi = [{"gpu": 0, "profile": "1g.18gb", "profile_id": 19, "instance_id": 7, "start": 0, "size": 1}]
    _, layout, _ = checks.mig_checks(dict(gpu, mig_current=True, mig_pending=True), expect, lgi, [])
    assert layout.status == "fail"
    assert layout.reason == "MIG layout differs: missing 1g.18gb@6; unexpected 1g.18gb@0"


def test_device_file_permissions(expect: dict[str, Any]) -> None:
    good = {"owner": "root", "group": "video", "mode": "0660"}
    assert checks.device_file_check("gpu0.device_file", "/dev/nvidia0", good, expect).status == "pass"
    bad = checks.device_file_check("gpu0.device_file", "/dev/nvidia0", dict(good, mode="0666"), expect)
    assert bad.status == "fail" and bad.reason == "/dev/nvidia0: mode 0666 (want 0660)"
    expect["device_permissions"] = None
    assert checks.device_file_check("gpu0.device_file", "/dev/nvidia0", good, expect).status == "skip"


def _probe(gbps: float, mismatches: int = 0, data_ok: bool = True) -> dict[str, Any]:
    return {"ordinal": 0, "name": "NVIDIA H200",
            "vector_add": {"elements": 1 << 20, "mismatches": mismatches, "seconds": 0.4},
            "bandwidth": {"bytes_per_copy": 1 << 30, "repeats": 10, "ms": 5.0, "gbps": gbps, "data_ok": data_ok}}


def test_cuda_checks_real_figure_passes(expect: dict[str, Any]) -> None:
    vadd, bw = checks.cuda_checks("gpu0", _probe(4251.7), expect, None, gpu=0)
    assert vadd.status == "pass" and bw.status == "pass"
    assert bw.expected["min_gbps"] == 4080.0 and bw.expected["counting"] == "bytes read + bytes written"


def test_bandwidth_below_floor_fails(expect: dict[str, Any]) -> None:
    _, bw = checks.cuda_checks("gpu0", _probe(3000.0), expect, None, gpu=0)
    assert bw.status == "fail" and bw.reason == "3000 GB/s is 62% of the model's 4800 GB/s (floor 85%)"


def test_mig_slice_bandwidth_scaled(expect: dict[str, Any]) -> None:
    _, bw = checks.cuda_checks("gpu0.gi2", _probe(2100.0), expect, None, bandwidth_share=4 / 8, gpu=0,
                               mig_uuid="MIG-x")
    assert bw.status == "pass" and bw.expected["min_gbps"] == 2040.0 and bw.mig_uuid == "MIG-x"


def test_wrong_sums_fail(expect: dict[str, Any]) -> None:
    vadd, _ = checks.cuda_checks("gpu0", _probe(4200.0, mismatches=7), expect, None, gpu=0)
    assert vadd.status == "fail" and vadd.reason == "7 of 1048576 sums wrong"


def test_cuda_skip_and_errors(expect: dict[str, Any]) -> None:
    skipped = checks.cuda_checks("gpu0", None, expect, "libcuda.so.1 not loadable: x", gpu=0)
    assert [c.status for c in skipped] == ["skip", "skip"]
    missing = checks.cuda_checks("gpu0", None, expect, None, gpu=0)
    assert missing[0].status == "fail" and missing[0].reason == "CUDA did not list this device"
    broken = checks.cuda_checks("gpu0", {"error": "cuModuleLoadData failed: CUDA_ERROR_INVALID_PTX (218)"},
                                expect, None, gpu=0)
    assert broken[0].status == "fail" and "INVALID_PTX" in broken[0].reason


def test_peer_checks_real_figures(expect: dict[str, Any]) -> None:
    pair = {"src": 0, "dst": 1, "can_access_peer": True, "bytes_per_copy": 1 << 30, "repeats": 5, "ms": 13.6,
            "gbps": 395.3, "data_ok": True}
    access, bw = checks.peer_checks(pair, {"read": "OK", "write": "OK"}, 478.116, expect)
    assert access.status == "pass" and bw.status == "pass" and bw.expected["min_gbps"] == 239.1
    _, slow = checks.peer_checks(dict(pair, gbps=100.0), None, 478.116, expect)
    assert slow.status == "fail"
    _, pcie = checks.peer_checks(dict(pair, gbps=20.0), None, None, expect)
    assert pcie.status == "pass" and "speed reported only" in pcie.reason
    no_access, _ = checks.peer_checks(dict(pair, can_access_peer=False), None, None, expect)
    assert no_access.status == "fail"


def test_container_check(expect: dict[str, Any], fixtures: Path) -> None:
    assert checks.container_check(None, expect, 1).status == "skip"
    expect["container"] = {"kind": "docker", "runtime": "nvidia", "cdi": False, "image": "ubuntu:24.04"}
    listing = (fixtures / "h200x2" / "nvidia-smi_-L.txt").read_text()
    ok = checks.container_check({"returncode": 0, "stdout": listing, "stderr": "", "command": "docker run"},
                                expect, 2)
    assert ok.status == "pass" and ok.measured["devices"] == 2
    short = checks.container_check({"returncode": 0, "stdout": listing, "stderr": "", "command": "x"}, expect, 3)
    assert short.status == "fail" and short.reason == "container sees 2 GPU device(s), expected 3"
    broken = checks.container_check({"returncode": 125, "stdout": "", "command": "x",
                                     "stderr": "docker: Error response from daemon: unknown or invalid runtime "
                                               "name: nvidia."}, expect, 2)
    assert broken.status == "fail" and "unknown or invalid runtime name" in broken.reason
    absent = checks.container_check({"error": "docker not found", "command": "docker run"}, expect, 2)
    assert absent.status == "fail" and absent.reason == "docker not found"


def test_allocatable(expect: dict[str, Any]) -> None:
    expect["kubernetes"] = {"enabled": True, "allocatable": {"nvidia.com/mig-3g.71gb": 2, "nvidia.com/gpu": 1}}
    node = {"status": {"allocatable": {"cpu": "32", "nvidia.com/gpu": "1", "nvidia.com/mig-3g.71gb": "2"}}}
    assert checks.allocatable_check(node, None, expect).status == "pass"
    wrong = copy.deepcopy(node)
    wrong["status"]["allocatable"]["nvidia.com/mig-3g.71gb"] = "0"
    wrong["status"]["allocatable"]["nvidia.com/mig-1g.18gb"] = "1"
    check = checks.allocatable_check(wrong, None, expect)
    assert check.status == "fail"
    assert check.reason == ("allocatable differs: nvidia.com/mig-3g.71gb=0 (want 2), "
                            "nvidia.com/mig-1g.18gb=1 (not expected)")
    assert checks.allocatable_check(None, "kubectl: not found", expect).status == "fail"


def test_pod_check() -> None:
    good = {"driver_version": 13000, "devices": [{"ordinal": 0, "vector_add": {"mismatches": 0}}]}
    assert checks.pod_check(good, None).status == "pass"
    two = {"devices": good["devices"] * 2}
    assert checks.pod_check(two, None).reason == "pod saw 2 device(s)"
    assert checks.pod_check(None, "pod ended Failed in 180 s: ImportError").status == "fail"
    assert checks.pod_check({"error": "libcuda.so.1 not loadable: x"}, None).reason.startswith("in the pod:")


def test_counts_without_sysfs_is_skip(expect: dict[str, Any], gpu: dict[str, Any]) -> None:
    count, pci = checks.count_checks([gpu], None, expect)
    assert count.status == "pass" and pci.status == "skip"


def test_container_counts_mig_devices_and_whole_gpus(expect: dict[str, Any]) -> None:
    expect["container"] = {"kind": "docker", "runtime": "nvidia", "cdi": True, "image": "ubuntu:24.04"}
    listing = ("GPU 0: NVIDIA H200 (UUID: GPU-d3d4d48e-bb4a-7dfe-ba8d-0c72be5897cc)\n"
               "  MIG 3g.71gb      Device  0: (UUID: MIG-11111111-2222-3333-4444-555555555555)\n"
               "  MIG 3g.71gb      Device  1: (UUID: MIG-66666666-7777-8888-9999-000000000000)\n"
               "GPU 1: NVIDIA H200 (UUID: GPU-c7bb669a-6c98-84b7-fff1-a0bc7cbb3d54)\n")
    check = checks.container_check({"returncode": 0, "stdout": listing, "stderr": "", "command": "x"}, expect, 3)
    assert check.status == "pass" and check.measured["devices"] == 3
