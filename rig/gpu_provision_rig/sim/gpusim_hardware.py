"""The simulated GPUs: each one's identity from gpus.json and its model's tables (stand-in, not NVIDIA software).

Profile tables come from the project's GPU model files copied to ``/usr/share/gpu-sim/gpus/`` and read through the
project's one catalog reader (``gpu_provision/node/catalog.py``, installed next to this file as ``catalog.py``);
the values nvidia-smi prints that those files do not hold come from ``hardware.json``.
"""

from __future__ import annotations

import os
from typing import Any

from gpusim_config import config_path, data_dir, load_json
from gpusim_errors import RC_NOT_FOUND, SimError

try:
    from catalog import load_model
except ImportError:  # run from a checkout, where the catalog reader is the product's own module
    from gpu_provision.node.catalog import load_model


class Gpu:
    """One simulated GPU: its identity from gpus.json plus its model's tables."""

    def __init__(self, entry: dict, model: dict, hardware: dict) -> None:
        self.entry = entry
        self.model = model
        self.hw = hardware
        self.index: int = int(entry["index"])
        self.uuid: str = entry["uuid"]
        self.bus_id: str = entry["pci_bus_id"].upper() if entry["pci_bus_id"] else ""
        self.serial: str = str(entry.get("serial", "N/A"))
        telemetry = dict(hardware.get("telemetry", {}))
        telemetry.update(entry.get("telemetry", {}))
        self.telemetry = telemetry

    @property
    def name(self) -> str:
        return self.entry.get("name") or self.hw.get("product_name") or self.model["product_names"][0]

    @property
    def architecture(self) -> str:
        return self.model.get("architecture", "unknown").capitalize()

    @property
    def hopper_or_later(self) -> bool:
        return self.model.get("architecture") not in ("ampere", "turing", "volta", "pascal", "ada")

    @property
    def profiles(self) -> list[dict]:
        return list(self.model.get("mig", {}).get("profiles", []))

    @property
    def mig_capable(self) -> bool:
        return bool(self.profiles)

    @property
    def memory_slices(self) -> int:
        return int(self.model.get("mig", {}).get("memory_slices", 8))

    @property
    def compute_slices(self) -> int:
        return int(self.model.get("mig", {}).get("compute_slices", 7))

    def hwv(self, key: str, default: Any = "N/A") -> Any:
        """A per-GPU override from gpus.json, else the model's hardware default, else what the model file says."""
        fallback = {
            "pci_device_id": (self.model.get("pci_device_ids") or [default])[0],
            "memory_total_mib": int(self.model.get("memory_gib", 0)) * 1024 or default,
        }.get(key, default)
        return self.entry.get(key, self.hw.get(key, fallback))

    def profile(self, ref: str) -> dict:
        """Resolve a GPU-instance profile by id, short name or ``MIG <name>`` (as -cgi accepts)."""
        ref = ref.strip()
        if ref.upper().startswith("MIG "):
            ref = ref[4:].strip()
        for p in self.profiles:
            if ref.isdigit() and int(ref) == int(p["id"]):
                return p
            if ref == p["name"]:
                return p
        raise SimError(f"Unable to find GPU instance profile {ref}: Not Found", RC_NOT_FOUND)

    def resources(self, profile: dict) -> dict:
        """The -lgip resource columns; derived from slices where the model file has none."""
        if "resources" in profile:
            return profile["resources"]
        total_gib = float(self.model.get("memory_gib", 0))
        sms = int(self.hw.get("sm_count", 0))
        per_slice = sms // self.compute_slices if sms else 0
        cs = int(profile["compute_slices"])
        return {
            "memory_gib": round(total_gib * int(profile["memory_slices"]) / self.memory_slices * 0.975, 2),
            "sm": per_slice * cs,
            "ce": cs,
            "dec": 0,
            "enc": 0,
            "jpeg": 0,
            "ofa": 0,
            "p2p": False,
        }


def load_gpus() -> list[Gpu]:
    """Read the node's simulated hardware; no file means no NVIDIA GPU in this node."""
    try:
        config = load_json(config_path())
    except FileNotFoundError:
        return []
    models_dir = os.path.join(data_dir(), "gpus")
    hardware_all = load_json(os.path.join(data_dir(), "hardware.json"))
    gpus = []
    for entry in config.get("gpus", []):
        model_key = entry["model"]
        model = load_model(model_key, models_dir)
        gpus.append(Gpu(entry, model, hardware_all["models"].get(model_key, {})))
    gpus.sort(key=lambda g: g.index)
    return gpus


def select_gpus(gpus: list[Gpu], ids: str | None) -> list[Gpu]:
    """Resolve ``-i`` (indexes, UUIDs or PCI bus ids, comma separated) like nvidia-smi."""
    if not ids:
        return gpus
    chosen = []
    for ref in ids.split(","):
        ref = ref.strip()
        match = None
        for gpu in gpus:
            bus = gpu.bus_id.lower()
            r = ref.lower()
            if (ref.isdigit() and int(ref) == gpu.index) or r == gpu.uuid.lower() or r in (bus, bus[4:]):
                match = gpu
        if match is None:
            raise SimError("No devices were found", RC_NOT_FOUND)
        chosen.append(match)
    return chosen
