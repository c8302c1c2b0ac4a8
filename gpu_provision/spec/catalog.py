"""GPU model data: product names, PCI ids, architecture, bandwidth, driver minimums, kernel modules, the NVSwitch
fabric's needs, MIG and vGPU tables.

The facts live in ``gpu_provision/data/gpus/<MODEL>.json``, one file per model, each naming its sources; they are
read by :mod:`gpu_provision.node.catalog` (the one reader) and typed here. A new model is one new file: no code
names a model. ``GPU_PROVISION_GPU_DATA`` names another directory of model files for the controller's commands,
so a model file can be tried (``validate``, ``plan``, ``mig-plan``) before it joins the package; the schema and the
reference page always describe the package's own directory.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from gpu_provision.node import catalog as files
from gpu_provision.node.mig.model import ProfileTable

#: The environment variable that points the controller's catalog at another directory of model files.
DATA_ENV = "GPU_PROVISION_GPU_DATA"


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
    #: Whether NVIDIA's open kernel modules drive this model (``driver.kernel_modules: auto`` picks them then).
    open_modules_supported: bool
    #: Whether the NVSwitches of this model's baseboards need the NVLink Subnet Manager (NVLSM) beside Fabric
    #: Manager. The data file also names those baseboards (``fabric.nvswitch_baseboards``) for its reader; whether
    #: a node has NVSwitches is read from its PCI bus, since one model comes on boards with and without them.
    nvlsm: bool
    #: The model's MIG table (the node-side MIG model's type, shared with the node applier), None without MIG.
    mig: ProfileTable | None
    vgpu_types: tuple[str, ...]


def _typed(doc: dict[str, Any]) -> GpuModel:
    mig = ProfileTable.from_dict(doc["mig"]) if "mig" in doc else None
    fabric = doc.get("fabric", {})
    return GpuModel(
        key=doc["model"],
        product_names=tuple(doc["product_names"]),
        pci_device_ids=tuple(doc["pci_device_ids"]),
        architecture=doc["architecture"],
        memory_gib=doc["memory_gib"],
        memory_bandwidth_gbs=doc["memory_bandwidth_gbs"],
        min_driver=doc["min_driver"],
        open_modules_required=doc.get("open_modules_required", False),
        open_modules_supported=bool(doc["open_modules_supported"]),
        nvlsm=bool(fabric.get("nvlsm", False)),
        mig=mig,
        vgpu_types=tuple(doc.get("vgpu", {}).get("types", ())),
    )


@cache
def models() -> dict[str, GpuModel]:
    """Every known model by key (``"H200"``, ``"A100-80GB"``, ...), from ``$GPU_PROVISION_GPU_DATA`` when set."""
    return {key: _typed(doc) for key, doc in files.load_models(os.environ.get(DATA_ENV) or None).items()}


def packaged_keys() -> list[str]:
    """The model keys of the package's own data files, sorted: what the schema and the reference page list.

    Read from the file names (``<MODEL>.json``, which :func:`gpu_provision.node.catalog.load_model` relies on too),
    so describing the settings opens no model file."""
    return sorted(name[:-len(".json")] for name in os.listdir(files.DEFAULT_DIR) if name.endswith(".json"))


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
