"""Where the GPU simulator finds its files and what time it prints (stand-in, not NVIDIA software).

Each path has its installed default and a ``GPU_SIM_*`` override (listed in ``gpusim.py``), so tests lay a whole
node out in a temporary folder.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any


def env_path(name: str, default: str) -> str:
    """Return the path configured by environment variable ``name`` or ``default``."""
    return os.environ.get(name) or default


def config_path() -> str:
    return env_path("GPU_SIM_CONFIG", "/etc/gpu-sim/gpus.json")


def state_dir() -> str:
    return env_path("GPU_SIM_STATE_DIR", "/var/lib/gpu-sim")


def data_dir() -> str:
    return env_path("GPU_SIM_DATA_DIR", "/usr/share/gpu-sim")


def lib_dir() -> str:
    return env_path("GPU_SIM_LIB_DIR", "/usr/lib/gpu-sim")


def run_dir() -> str:
    return env_path("GPU_SIM_RUN_DIR", "/run/gpu-sim")


def load_json(path: str) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def now() -> float:
    """Current time, or the fixed clock from GPU_SIM_CLOCK (so date lines can be compared)."""
    fixed = os.environ.get("GPU_SIM_CLOCK")
    return float(fixed) if fixed else time.time()


def date_line() -> str:
    """The ``Sun Nov 29 21:18:36 2026`` form nvidia-smi prints (C ``asctime`` layout)."""
    return time.asctime(time.gmtime(now()) if os.environ.get("GPU_SIM_CLOCK") else time.localtime(now()))
