"""GPU model data files: the one reader of ``<MODEL>.json`` (names, PCI ids, bandwidth, driver minimums, MIG tables).

The files live in ``gpu_provision/data/gpus/``, one per model, each citing its sources. Every consumer reads them
through this module: the controller's typed catalog (:mod:`gpu_provision.spec.catalog`), the verification
expectations, and the test rig's GPU simulator, which carries the files (and this module) into its nodes. So it is
node-side code: Python 3.9+, standard library only, and the directory is a parameter.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional

#: Where the files are when this module runs from the installed package or a checkout.
DEFAULT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "gpus")

#: Keys every model file has; a file without them is refused with its path rather than failing later.
REQUIRED = ("model", "product_names", "pci_device_ids", "architecture", "memory_gib", "memory_bandwidth_gbs",
            "min_driver", "open_modules_supported")


class CatalogError(Exception):
    """A model file is missing, unreadable or incomplete; the message names the file."""


def read_model(path: str) -> Dict[str, Any]:
    """One model file as a dict, checked for the keys every consumer relies on."""
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except (OSError, ValueError) as exc:
        raise CatalogError(f"{path}: cannot read GPU model file: {exc}") from None
    missing = [key for key in REQUIRED if key not in doc]
    if missing:
        raise CatalogError(f"{path}: GPU model file lacks {', '.join(missing)}")
    return doc


def load_models(directory: Optional[str] = None) -> Dict[str, Dict[str, Any]]:
    """Every model file in ``directory`` (default: the package's), by model key (``"H200"``, ``"A100-80GB"``)."""
    directory = directory or DEFAULT_DIR
    docs = (read_model(os.path.join(directory, name))
            for name in sorted(os.listdir(directory)) if name.endswith(".json"))
    return {doc["model"]: doc for doc in docs}


def load_model(key: str, directory: Optional[str] = None) -> Dict[str, Any]:
    """The file of model ``key`` only (the simulator reads just the models its node has)."""
    return read_model(os.path.join(directory or DEFAULT_DIR, key + ".json"))
