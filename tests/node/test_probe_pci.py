"""The probe's PCI reading from a fake sysfs tree: every NVIDIA function with its class, NVSwitches included."""

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
