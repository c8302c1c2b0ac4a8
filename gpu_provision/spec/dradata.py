"""What NVIDIA's DRA driver needs and registers, read from ``gpu_provision/data/dra.json``.

The thresholds and object facts live in the data file beside the source each follows, so a new driver release
changes a data file, not the checks (:mod:`gpu_provision.spec.dra`) or the renderers (:mod:`gpu_provision.k8s.dra`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA: dict[str, Any] = json.loads((Path(__file__).resolve().parent.parent / "data" / "dra.json").read_text())
_REQUIRES = DATA["requirements"]

#: The oldest Kubernetes release the driver supports.
KUBERNETES_MIN: str = _REQUIRES["kubernetes_min"]["value"]
#: The oldest NVIDIA driver branch that can serve GPU allocation through DRA.
DRIVER_BRANCH_MIN: int = _REQUIRES["driver_branch_min"]["value"]
#: The oldest containerd with CDI on by default.
CONTAINERD_MIN: str = _REQUIRES["containerd_min"]["value"]
#: The ``container_runtime.docker_source`` values whose containerd, unless pinned, may be older than
#: :data:`CONTAINERD_MIN` (the distribution's archive).
CONTAINERD_UNPINNED: tuple[str, ...] = tuple(_REQUIRES["containerd_unpinned"]["value"])
#: The containerd releases the distributions' release pockets ship, by distribution release (for messages).
ARCHIVE_CONTAINERD: dict[str, str] = dict(_REQUIRES["containerd_unpinned"]["release_pockets"])
#: The driver's name: the ``spec.driver`` of its ResourceSlices and the attribute domain its CEL selectors read.
DRIVER_NAME: str = DATA["driver"]["name"]
#: The driver image of the release this project renders.
DRIVER_IMAGE: str = DATA["driver"]["image"]
#: The ResourceQuota key counting a namespace's ResourceClaim objects (the object-count form; no short alias).
QUOTA_CLAIMS: str = DATA["quota"]["claims"]
#: The ResourceQuota key counting the devices claimed through one DeviceClass (``{device_class}`` filled in).
QUOTA_DEVICES: str = DATA["quota"]["devices_per_class"]
#: DeviceClass name -> ``{"type": device type, "extended_resource_name": ...}``.
DEVICE_CLASSES: dict[str, dict[str, str]] = {k: v for k, v in DATA["device_classes"].items() if k != "source"}


def source(key: str) -> str:
    """The text of source ``key`` (for messages that say where a threshold comes from)."""
    return str(DATA["sources"][key])
