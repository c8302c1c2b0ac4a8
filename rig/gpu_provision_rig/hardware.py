"""Simulated GPU hardware of a rig node: the GPU description and a PCI view, both written before the node boots.

``/etc/gpu-sim/gpus.json`` in the node lists its GPUs (model, index, uuid, PCI bus id, serial); uuids and serials are
derived from the node name and GPU index, so a node reset to fresh shows the same GPUs again.

The PCI view: ``/etc/gpu-sim/pci-devices/<bus id>/{vendor,device,class,uevent}`` holds one directory per simulated
GPU (vendor 0x10de, the model's first PCI device id, class 0x030200) plus the host's own PCI functions, and the rig
bind-mounts it read-only over ``/sys/bus/pci/devices`` inside the node right after the node's systemd starts. It
cannot be done with nspawn's ``--bind-ro=DIR:/sys/bus/pci/devices``: nspawn mounts a fresh sysfs over ``/sys`` after
applying custom binds (sysfs must match the node's network namespace), which hides such a bind; the rig therefore
enters the node's mount namespace with ``nsenter`` and binds there. Entries are plain directories, not the symlinks
into ``/sys/devices`` the kernel makes, which is enough for a reader of ``/sys/bus/pci/devices/*/vendor``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
import shutil
from pathlib import Path
from typing import Any

from gpu_provision.node.catalog import load_models
from gpu_provision_rig.config import RigNode
from gpu_provision_rig.errors import RigError

NODE_SIM_DIR = "etc/gpu-sim"
NODE_PCI_DIR = "etc/gpu-sim/pci-devices"
NVIDIA_VENDOR = "0x10de"
GPU_PCI_CLASS = "0x030200"
FIRST_GPU_SLOT = 6
HOST_PCI_DEVICES = Path("/sys/bus/pci/devices")


@functools.cache
def _models() -> dict[str, dict[str, Any]]:
    return load_models()


def known_models() -> list[str]:
    """GPU model keys with a data file in the product's GPU catalog (``gpu_provision/data/gpus``)."""
    return sorted(_models())


def model_data(model: str) -> dict[str, Any]:
    """The catalog entry of ``model``, read through the product's one catalog reader; RigError if there is none."""
    if model not in _models():
        raise RigError(f"unknown GPU model {model!r}; known: {', '.join(known_models())}")
    return _models()[model]


def pci_ids(model: str) -> tuple[str, str]:
    """``(vendor, device)`` in sysfs spelling for the first PCI id of ``model`` (``0x233510DE`` -> 0x10de, 0x2335)."""
    combined = int(model_data(model)["pci_device_ids"][0], 16)
    return f"0x{combined & 0xFFFF:04x}", f"0x{combined >> 16:04x}"


def _digest(node: str, index: int, what: str) -> str:
    return hashlib.sha256(f"{node}:{index}:{what}".encode()).hexdigest()


def gpu_uuid(node: str, index: int) -> str:
    """Deterministic ``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` for GPU ``index`` of ``node``."""
    h = _digest(node, index, "uuid")
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def gpu_serial(node: str, index: int) -> str:
    """Deterministic 13-digit board serial for GPU ``index`` of ``node``."""
    return str(int(_digest(node, index, "serial"), 16) % 10**13).zfill(13)


def pci_bus_id(index: int) -> str:
    """nvidia-smi's spelling of GPU ``index``'s bus id: ``00000000:00:06.0`` for 0, then one slot per GPU."""
    return f"00000000:00:{FIRST_GPU_SLOT + index:02x}.0"


def gpu_description(node: RigNode) -> dict[str, list[dict[str, Any]]]:
    """The content of the node's ``/etc/gpu-sim/gpus.json``; ``{"gpus": []}`` for a node without GPUs."""
    if node.gpu_model is None or node.gpu_count == 0:
        return {"gpus": []}
    model_data(node.gpu_model)
    return {"gpus": [{"model": node.gpu_model, "index": i, "uuid": gpu_uuid(node.name, i),
                      "pci_bus_id": pci_bus_id(i), "serial": gpu_serial(node.name, i)}
                     for i in range(node.gpu_count)]}


def write_kernel_headers(root: Path) -> None:
    """Stand-in kernel headers for the running kernel under the node root ``root``.

    Rig nodes run the host's kernel, for which no headers package exists in any repository the rig reaches, so the
    driver's DKMS preflight would refuse every node. ``/lib/modules/<kernel>/build`` is where DKMS and the preflight
    look for headers; the rig lays a marked directory there, as a machine with ``linux-headers-<kernel>`` has.
    """
    build = root / "usr/lib/modules" / platform.release() / "build"
    build.mkdir(parents=True, exist_ok=True)
    (build / "STAND-IN").write_text("Stand-in for the test rig: headers of the host kernel the node runs on.\n")


def write_hardware(root: Path, node: RigNode) -> None:
    """Write gpus.json, the PCI view and stand-in kernel headers of ``node`` under the node root ``root``."""
    write_kernel_headers(root)
    sim = root / NODE_SIM_DIR
    sim.mkdir(parents=True, exist_ok=True)
    description = gpu_description(node)
    (sim / "gpus.json").write_text(json.dumps(description, indent=2) + "\n")
    pci = root / NODE_PCI_DIR
    if pci.exists():
        shutil.rmtree(pci)
    pci.mkdir()
    gpu_slots = set()
    if node.gpu_model is not None:
        vendor, device = pci_ids(node.gpu_model)
        for gpu in description["gpus"]:
            slot = gpu["pci_bus_id"][4:].lower()
            gpu_slots.add(slot)
            _write_function(pci / slot, vendor, device, GPU_PCI_CLASS)
    for host_fn in sorted(HOST_PCI_DEVICES.glob("*")):
        if host_fn.name in gpu_slots:
            continue
        try:
            values = [(host_fn / f).read_text().strip() for f in ("vendor", "device", "class")]
        except OSError:
            continue
        _write_function(pci / host_fn.name, *values)


def _write_function(path: Path, vendor: str, device: str, pci_class: str) -> None:
    path.mkdir()
    (path / "vendor").write_text(vendor + "\n")
    (path / "device").write_text(device + "\n")
    (path / "class").write_text(pci_class + "\n")
    (path / "uevent").write_text(f"PCI_CLASS={int(pci_class, 16):X}\n"
                                 f"PCI_ID={vendor[2:].upper()}:{device[2:].upper()}\nPCI_SLOT_NAME={path.name}\n")
