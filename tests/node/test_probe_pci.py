"""The probe's PCI reading from a fake sysfs tree: every NVIDIA function with its class, NVSwitches included, and
the NVLink 5 management bridges found by their VPD."""

from __future__ import annotations

from pathlib import Path

from gpu_provision.node.probe import gpu


def _function(root: Path, address: str, vendor: str, device: str, klass: str) -> None:
    path = root / "bus" / "pci" / "devices" / address
    path.mkdir(parents=True)
    (path / "vendor").write_text(vendor + "\n")
    (path / "device").write_text(device + "\n")
    (path / "class").write_text(klass + "\n")


def test_gpus_nvswitches_and_audio_are_read_other_vendors_are_not(tmp_path: Path) -> None:
    _function(tmp_path, "0000:05:00.0", "0x10de", "0x22a3", "0x068000")   # NVSwitch: bridge, other
    _function(tmp_path, "0000:18:00.0", "0x10de", "0x2335", "0x030200")   # H200: 3D controller
    _function(tmp_path, "0000:18:00.1", "0x10de", "0x22e8", "0x040300")   # audio function
    _function(tmp_path, "0000:00:1f.0", "0x8086", "0x1234", "0x068000")   # another vendor's bridge
    assert gpu.pci(str(tmp_path)) == [
        {"address": "0000:05:00.0", "device": "0x22a3", "class": "0x068000", "gpu": False},
        {"address": "0000:18:00.0", "device": "0x2335", "class": "0x030200", "gpu": True},
        {"address": "0000:18:00.1", "device": "0x22e8", "class": "0x040300", "gpu": False},
    ]


def test_a_function_that_cannot_be_read_is_skipped(tmp_path: Path) -> None:
    _function(tmp_path, "0000:05:00.0", "0x10de", "0x22a3", "0x068000")
    (tmp_path / "bus" / "pci" / "devices" / "0000:05:00.0" / "class").unlink()
    assert gpu.pci(str(tmp_path)) == []
    assert gpu.pci(str(tmp_path / "absent")) == []


def _vpd(fields: dict[str, bytes]) -> bytes:
    """A PCI VPD image (PCI Local Bus spec 3.0, I.3): identifier string, read-only keywords, end tag."""
    ident = b"NVIDIA ConnectX-7 bridge (sample)"
    body = b"".join(key.encode() + bytes([len(value)]) + value for key, value in fields.items())
    return (bytes([0x82, len(ident), 0]) + ident + bytes([0x90, len(body) & 0xFF, len(body) >> 8]) + body
            + bytes([0x78]))


def test_nvlink5_bridges_are_the_functions_of_the_vendor_whose_vpd_holds_the_marker(tmp_path: Path) -> None:
    """As NVIDIA's driver container decides an NVLink 5 board (``grep -q SW_MNG`` over the functions' VPD): the
    marker anywhere in the VPD. A plain ConnectX NIC of the same vendor, and a function whose VPD cannot be read,
    are not bridges."""
    devices = tmp_path / "bus" / "pci" / "devices"
    _function(tmp_path, "0000:a0:00.1", "0x15b3", "0x1021", "0x020700")
    (devices / "0000:a0:00.1" / "vpd").write_bytes(_vpd({"PN": b"MCX750500B-0D00", "V3": b"SMDL=SW_MNG"}))
    _function(tmp_path, "0000:a1:00.0", "0x15b3", "0x1021", "0x020700")
    (devices / "0000:a1:00.0" / "vpd").write_bytes(_vpd({"PN": b"MCX755106AS-HEAT", "V3": b"SMDL=NIC"}))
    _function(tmp_path, "0000:a2:00.0", "0x15b3", "0x1021", "0x020700")   # no vpd file
    _function(tmp_path, "0000:05:00.0", "0x10de", "0x22a3", "0x068000")
    (devices / "0000:05:00.0" / "vpd").write_bytes(b"SW_MNG")             # another vendor: not looked at
    assert gpu.vpd_functions("0x15b3", "SW_MNG", str(tmp_path)) == [
        {"address": "0000:a0:00.1", "vendor": "0x15b3", "device": "0x1021"}]


def test_the_controller_asks_for_the_bridges_with_its_data_files_facts() -> None:
    """The gpu section's request carries the vendor and marker from ``packages.json`` (the node has no data files)."""
    from gpu_provision.state import Request

    assert Request(sections={"system", "gpu"}).to_probe()["gpu"] == {
        "nvlink5_bridge": {"vendor": "0x15b3", "vpd_marker": "SW_MNG"}}
    assert gpu._bridges(None) == [] and gpu._bridges({}) == []
