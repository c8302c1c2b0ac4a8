"""The node's GPUs under DRA: what NVIDIA's DRA driver lists for this node in its ResourceSlices.

With ``kubernetes.gpu_allocation: dra`` no device plugin advertises ``nvidia.com/*`` allocatable resources; the
driver's kubelet plugin publishes the node's devices in ResourceSlices instead (one pool per node, named after it).
The check ``node.kubernetes.allocatable`` then compares those devices, counted as ``gpu`` and ``mig-<profile>`` by
the driver's ``type`` and ``profile`` attributes, with what the cluster file implies.
"""

from __future__ import annotations

import time

from . import runtime
from .report import Check, failed, judge

TYPE_CHECKING = False
if TYPE_CHECKING:  # the agent imports no typing at run time (see report.Check)
    from typing import Any

DRIVER = "gpu.nvidia.com"
CHECK = "node.kubernetes.allocatable"


def _attribute(device: dict[str, Any], name: str) -> str | None:
    """A string attribute by its short name or qualified by the driver's domain."""
    attributes = device.get("attributes") or {}
    value = attributes.get(name) or attributes.get(f"{DRIVER}/{name}") or {}
    return value.get("string")


def devices(slices: dict[str, Any], node_name: str) -> dict[str, int]:
    """Device counts (``gpu``, ``mig-<profile>``) the driver lists for ``node_name``, from a ResourceSliceList.

    Only each pool's newest generation counts: a driver replacing its slices leaves older ones behind briefly.
    """
    mine = [s.get("spec") or {} for s in slices.get("items") or []]
    mine = [s for s in mine if s.get("driver") == DRIVER and s.get("nodeName") == node_name]
    newest: dict[str, int] = {}
    for spec in mine:
        pool = spec.get("pool") or {}
        newest[pool.get("name", "")] = max(newest.get(pool.get("name", ""), 0), int(pool.get("generation") or 0))
    out: dict[str, int] = {}
    for spec in mine:
        pool = spec.get("pool") or {}
        if int(pool.get("generation") or 0) != newest[pool.get("name", "")]:
            continue
        for device in spec.get("devices") or []:
            kind = _attribute(device, "type")
            key = f"mig-{_attribute(device, 'profile')}" if kind == "mig" else kind
            if key:
                out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))


def read(spec: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """This node's ResourceSlices (a ResourceSliceList), or an error message.

    The field selector is what a node's own credentials may list (the node authorizer limits a kubelet to its own
    slices); the driver and node are checked again in :func:`devices`.
    """
    return runtime.get_json(spec, "resourceslices", "--field-selector", f"spec.nodeName={spec['node_name']}")


def read_settled(spec: dict[str, Any], settle_s: float = 60.0, interval_s: float = 2.0,
                 clock: Any = time.monotonic, sleep: Any = time.sleep) -> tuple[dict[str, Any] | None, str | None]:
    """The slices once they list what the file implies, or after ``settle_s``: the plugin publishes them some
    seconds after its pod starts, as the device plugin registers its resources."""
    wanted = {k: int(v) for k, v in (spec.get("devices") or {}).items()}
    deadline = clock() + settle_s
    while True:
        found, error = read(spec)
        if error is not None or devices(found or {}, spec["node_name"]) == wanted or clock() >= deadline:
            return found, error
        sleep(interval_s)


def slice_check(slices: dict[str, Any] | None, error: str | None, expect: dict[str, Any]) -> Check:
    """node.kubernetes.allocatable under DRA: the devices the node's ResourceSlices list equal the file's."""
    kube = expect.get("kubernetes") or {}
    wanted = {k: int(v) for k, v in (kube.get("devices") or {}).items()}
    if error:
        return failed(CHECK, None, wanted, error)
    measured = devices(slices or {}, kube.get("node_name") or "")
    wrong = [f"{k}={measured.get(k, 0)} (want {v})" for k, v in sorted(wanted.items()) if measured.get(k, 0) != v]
    wrong += [f"{k}={n} (not expected)" for k, n in sorted(measured.items()) if k not in wanted]
    return judge(CHECK, not wrong, measured, wanted, "ResourceSlice of " + DRIVER + " differs: " + ", ".join(wrong))
