"""GPU model data: product names, PCI ids, architecture, bandwidth, driver minimums, MIG and vGPU tables.

The facts live in ``gpu_provision/data/gpus/<MODEL>.json``, one file per model, each naming its sources; they are
read by :mod:`gpu_provision.node.catalog` (the one reader) and typed here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from gpu_provision.node import catalog as files
from gpu_provision.node.mig.model import ProfileTable


@dataclass(frozen=True)
class GpuModel:
    """Everything known about one GPU model."""

    key: str
    product_names: tuple[str, ...]
    pci_device_ids: tuple[str, ...]
    architecture: str
    memory_gib: int
    memory_bandwidth_gbs: int
    min_driver: str
    open_modules_required: bool
    #: The model's MIG table (the node-side MIG model's type, shared with the node applier), None without MIG.
    mig: ProfileTable | None
    vgpu_types: tuple[str, ...]

    @property
    def open_modules_supported(self) -> bool:
        """Open kernel modules support Turing and newer."""
        return self.architecture in ("turing", "ampere", "ada", "hopper", "blackwell")


def _typed(doc: dict[str, Any]) -> GpuModel:
    mig = ProfileTable.from_dict(doc["mig"]) if "mig" in doc else None
    return GpuModel(
        key=doc["model"],
        product_names=tuple(doc["product_names"]),
        pci_device_ids=tuple(doc["pci_device_ids"]),
        architecture=doc["architecture"],
        memory_gib=doc["memory_gib"],
        memory_bandwidth_gbs=doc["memory_bandwidth_gbs"],
        min_driver=doc["min_driver"],
        open_modules_required=doc.get("open_modules_required", False),
        mig=mig,
        vgpu_types=tuple(doc.get("vgpu", {}).get("types", ())),
    )


@cache
def models() -> dict[str, GpuModel]:
    """Every known model by key (``"H200"``, ``"A100-80GB"``, ...)."""
    return {key: _typed(doc) for key, doc in files.load_models().items()}


def spelling(name: str) -> str:
    """The form model names are compared in: any case, without the ``NVIDIA``/``Tesla`` brand, with spaces,
    underscores and hyphens alike (``"NVIDIA H100 80GB HBM3"`` -> ``"h100-80gb-hbm3"``, ``"h100_80gb"`` ->
    ``"h100-80gb"``), so an operator can type a model as ``nvidia-smi`` prints it or as the catalog keys it."""
    words = re.split(r"[\s_-]+", name.strip().lower())
    if words and words[0] in ("nvidia", "tesla"):
        words = words[1:]
    return "-".join(w for w in words if w)


@cache
def _by_spelling() -> dict[str, GpuModel]:
    out: dict[str, GpuModel] = {}
    for m in models().values():
        for name in (*m.product_names, m.key):
            out[spelling(name)] = m
    return out


def model(key: str) -> GpuModel | None:
    """The model whose key or product name ``key`` spells, in any case and common spelling (``"h200"``,
    ``"H200"``, ``"NVIDIA H200"``, ``"h100-80gb"``, ``"H100 80GB HBM3"``; see :func:`spelling`), else None."""
    return models().get(key) or _by_spelling().get(spelling(key))
