"""The GPU simulator laid out in a temporary folder: model data, a 'loaded' driver, a boot id, and its settings.

Shared by the agent, MIG and stand-in tests (tests/ is on the import path through tests/conftest.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIM = REPO / "rig" / "gpu_provision_rig" / "sim" / "gpusim.py"
#: What the stand-in module load writes for the open module of driver 580.159.04.
OPEN_VERSION_LINE = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
                     "(dvs-builder@gpu-sim)  \n")


def lay_out(root: Path, version_line: str = OPEN_VERSION_LINE) -> dict[str, str]:
    """Write the simulator's data, driver, module and boot files under ``root``; its ``GPU_SIM_*`` settings."""
    data = root / "data"
    (data / "gpus").mkdir(parents=True)
    for model in (REPO / "gpu_provision" / "data" / "gpus").glob("*.json"):
        shutil.copy(model, data / "gpus" / model.name)
    shutil.copy(REPO / "rig" / "gpu_provision_rig" / "sim" / "hardware.json", data / "hardware.json")
    (root / "lib").mkdir()
    (root / "lib" / "driver.json").write_text(json.dumps({"version": "580.159.04", "cuda_version": "13.0"}))
    (root / "run").mkdir()
    (root / "run" / "version").write_text(version_line)
    (root / "boot_id").write_text("1")
    return {
        "GPU_SIM_CONFIG": str(root / "gpus.json"),
        "GPU_SIM_STATE_DIR": str(root / "state"),
        "GPU_SIM_DATA_DIR": str(data),
        "GPU_SIM_LIB_DIR": str(root / "lib"),
        "GPU_SIM_RUN_DIR": str(root / "run"),
        "GPU_SIM_BOOT_ID_FILE": str(root / "boot_id"),
        "GPU_SIM_PERSISTENCED_PID": str(root / "persistenced.pid"),
    }
