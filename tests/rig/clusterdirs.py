"""The controller directories a rig test's cluster file names (``cluster.controller_dirs``): the rig's state
directory, which holds its login key and known_hosts, and the directory of the rig's CNI stand-in manifest. A
cluster file may read controller files only from its own directory and those it names, and rig tests write their
cluster files into temporary directories."""

from __future__ import annotations

from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CNI_DIR = REPO / "rig" / "gpu_provision_rig" / "standins" / "kubernetes" / "common"


def controller_dirs(rig: Any) -> list[str]:
    """``cluster.controller_dirs`` for ``rig``'s key, known_hosts and CNI stand-in."""
    return [str(rig.paths.state), str(CNI_DIR)]
