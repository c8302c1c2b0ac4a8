"""The one reader of ``gpu_provision/data/packages.json``: vendor facts (package names, repositories, keys, versions,
board markers), each entry naming its source in the file's ``sources``."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

PACKAGES_FILE = Path(__file__).resolve().parent.parent / "data" / "packages.json"


@cache
def package_data() -> dict[str, Any]:
    """``gpu_provision/data/packages.json`` as data, read once."""
    return dict(json.loads(PACKAGES_FILE.read_text()))
