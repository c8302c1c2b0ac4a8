"""Parsers for what ``nvidia-smi`` prints for the agent alone: ``-q -x`` (XML), ``-L``, link and NVLink queries.

The ``mig -lgi``/``-lci`` tables and bus ids are read by the node's one reader of them,
:mod:`gpu_provision.node.mig.nvsmi`, which the probe reads them with too.

Every parser takes the command's text and returns plain dicts and lists, so the decisions in ``checks`` can be
tested on real captured outputs. Values nvidia-smi prints as ``N/A`` (or other non-numbers where a number is
expected) become ``None``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from ..mig.nvsmi import sysfs_address

TYPE_CHECKING = False
if TYPE_CHECKING:  # the agent imports no typing at run time (see report.Check)
    from typing import Any

_NOT_AVAILABLE = {"N/A", "[N/A]", "Not Supported", "[Not Supported]", "Unknown Error", ""}


def _text(node: ET.Element | None, path: str) -> str | None:
    """Return the stripped text at ``path`` under ``node``, or None where absent or not available."""
    if node is None:
        return None
    found = node.find(path)
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    return None if value in _NOT_AVAILABLE else value


def _int(node: ET.Element | None, path: str) -> int | None:
    """Return the leading integer at ``path`` (``16x`` -> 16, ``143771 MiB`` -> 143771), else None."""
    value = _text(node, path)
    if value is None:
        return None
    match = re.match(r"-?\d+", value)
    return int(match.group(0)) if match else None


def _yes(node: ET.Element | None, path: str) -> bool | None:
    """Map Enabled/Yes to True, Disabled/No to False, anything else to None."""
    value = _text(node, path)
    if value in ("Enabled", "Yes"):
        return True
    if value in ("Disabled", "No"):
        return False
    return None


def _sum_ints(node: ET.Element | None, paths: list[str]) -> int | None:
    """Sum the integers found at ``paths``; None when none of them is readable."""
    values = [v for v in (_int(node, p) for p in paths) if v is not None]
    return sum(values) if values else None


def normalize_pci_id(value: str | None) -> str | None:
    """Normalize a PCI device id to the ``0xDDDDVVVV`` form the GPU data files use (``233510DE`` -> ``0x233510DE``)."""
    if not value:
        return None
    bare = value.lower().removeprefix("0x")
    return "0x" + bare.upper()


def parse_query_xml(text: str) -> dict[str, Any]:
    """Parse ``nvidia-smi -q -x`` into ``{driver_version, cuda_version, attached_gpus, gpus: [...]}``.

    GPUs are listed in the order nvidia-smi prints them, which is their index order.
    """
    root = ET.fromstring(text)
    gpus = []
    for index, gpu in enumerate(root.findall("gpu")):
        pci = gpu.find("pci")
        link = pci.find("pci_gpu_link_info") if pci is not None else None
        ecc = gpu.find("ecc_errors")
        volatile = ecc.find("volatile") if ecc is not None else None
        aggregate = ecc.find("aggregate") if ecc is not None else None
        # Hopper prints dram/sram counters; older drivers print single_bit/double_bit, where only
        # double-bit errors are uncorrected.
        uncorrectable = ["dram_uncorrectable", "sram_uncorrectable_parity", "sram_uncorrectable_secded",
                         "sram_uncorrectable", "double_bit/total"]
        retired = gpu.find("retired_pages")
        remap = gpu.find("remapped_rows")
        gpus.append({
            "index": index,
            "minor_number": _int(gpu, "minor_number"),
            "bus_id": sysfs_address(gpu.get("id")) if gpu.get("id") else None,
            "name": _text(gpu, "product_name"),
            "uuid": _text(gpu, "uuid"),
            "pci_device_id": normalize_pci_id(_text(pci, "pci_device_id")),
            "persistence_mode": _yes(gpu, "persistence_mode"),
            "mig_current": _yes(gpu, "mig_mode/current_mig"),
            "mig_pending": _yes(gpu, "mig_mode/pending_mig"),
            "ecc_current": _yes(gpu, "ecc_mode/current_ecc"),
            "ecc_pending": _yes(gpu, "ecc_mode/pending_ecc"),
            "ecc_uncorrected_volatile": _sum_ints(volatile, uncorrectable),
            "ecc_uncorrected_aggregate": _sum_ints(aggregate, uncorrectable),
            "retired_pending": _yes(retired, "pending_retirement"),
            "retired_count": _sum_ints(retired, ["multiple_single_bit_retirement/retired_count",
                                                 "double_bit_retirement/retired_count"]),
            "remapped_rows": None if remap is None or _text(remap, "remapped_row_pending") is None else {
                "correctable": _int(remap, "remapped_row_corr"),
                "uncorrectable": _int(remap, "remapped_row_unc"),
                "pending": _yes(remap, "remapped_row_pending"),
                "failure": _yes(remap, "remapped_row_failure"),
            },
            "pcie_gen_current": _int(link, "pcie_gen/current_link_gen"),
            "pcie_gen_max": _int(link, "pcie_gen/max_link_gen"),
            "pcie_gen_device_max": _int(link, "pcie_gen/max_device_link_gen"),
            "pcie_width_current": _int(link, "link_widths/current_link_width"),
            "pcie_width_max": _int(link, "link_widths/max_link_width"),
            "performance_state": _text(gpu, "performance_state"),
            "memory_total_mib": _int(gpu, "fb_memory_usage/total"),
        })
    return {
        "driver_version": _text(root, "driver_version"),
        "cuda_version": _text(root, "cuda_version"),
        "attached_gpus": _int(root, "attached_gpus"),
        "gpus": gpus,
    }


# Patterns compiled on first use (re keeps them): a node without MIG never reads these outputs.
_L_GPU = r"^GPU (\d+): (.+?) \(UUID: (GPU-[^)]+)\)"
_L_MIG = r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)"


def parse_list(text: str) -> list[dict[str, Any]]:
    """Parse ``nvidia-smi -L``: one dict per GPU with its MIG devices ``[{profile, device, uuid}]``."""
    gpus: list[dict[str, Any]] = []
    for line in text.splitlines():
        gpu = re.match(_L_GPU, line)
        if gpu:
            gpus.append({"index": int(gpu.group(1)), "name": gpu.group(2), "uuid": gpu.group(3), "mig": []})
            continue
        mig = re.match(_L_MIG, line)
        if mig and gpus:
            gpus[-1]["mig"].append({"profile": mig.group(1), "device": int(mig.group(2)), "uuid": mig.group(3)})
    return gpus


def device_count(listing: list[dict[str, Any]]) -> int:
    """CUDA-usable devices in a ``parse_list`` result: each MIG device, or the GPU itself where it has none."""
    return sum(len(gpu["mig"]) or 1 for gpu in listing)


def parse_link_query(text: str) -> dict[int, tuple[int | None, int | None]]:
    """Parse ``--query-gpu=index,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader``."""
    result: dict[int, tuple[int | None, int | None]] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        gen = int(parts[1]) if parts[1].isdigit() else None
        width = int(parts[2]) if parts[2].isdigit() else None
        result[int(parts[0])] = (gen, width)
    return result


_NVLINK_GPU = r"^GPU (\d+): "
_NVLINK_LINK = r"^\s+Link (\d+): ([\d.]+) GB/s"


def parse_nvlink_status(text: str) -> dict[int, list[float]]:
    """Parse ``nvidia-smi nvlink -s``: the speed in GB/s of every active link, per GPU index."""
    links: dict[int, list[float]] = {}
    current: int | None = None
    for line in text.splitlines():
        gpu = re.match(_NVLINK_GPU, line)
        if gpu:
            current = int(gpu.group(1))
            links[current] = []
            continue
        link = re.match(_NVLINK_LINK, line)
        if link and current is not None:
            links[current].append(float(link.group(2)))
    return links


def parse_mig_devices(text: str) -> dict[int, list[dict[str, int]]]:
    """Read ``<mig_devices>`` from ``nvidia-smi -q -x``: per GPU index, ``[{index, gpu_instance_id, compute_instance_id}]``.

    The MIG device ``index`` is the ``Device N`` that ``nvidia-smi -L`` prints next to each MIG UUID.
    """
    root = ET.fromstring(text)
    result: dict[int, list[dict[str, int]]] = {}
    for gpu_index, gpu in enumerate(root.findall("gpu")):
        devices = []
        for mig in gpu.findall("mig_devices/mig_device"):
            index, gi, ci = _int(mig, "index"), _int(mig, "gpu_instance_id"), _int(mig, "compute_instance_id")
            if index is not None and gi is not None and ci is not None:
                devices.append({"index": index, "gpu_instance_id": gi, "compute_instance_id": ci})
        result[gpu_index] = devices
    return result
