"""node.kubernetes.labels: the labels GPU Feature Discovery put on the Node agree with the cluster file.

GFD derives them from what NVML finds (NVIDIA k8s-device-plugin ``internal/lm``): ``nvidia.com/gpu.product`` is the
product name with spaces as dashes (``NVIDIA-H200``; ``-SHARED`` appended to a shared, not renamed GPU; ``-MIG-<profile>``
under the single MIG strategy), ``nvidia.com/gpu.memory`` the GPU's memory in MiB as NVML counts it (a little under
the datasheet's figure), ``nvidia.com/mig.capable`` whether any GPU supports MIG, ``nvidia.com/mig.strategy`` the
device plugin config's strategy and ``nvidia.com/gpu.sharing-strategy`` ``none``, ``time-slicing`` or ``mps``. So
the product is matched by prefix and the memory within a tolerance; the rest exactly.
"""

from __future__ import annotations

from .report import Check, failed, judge, skipped

TYPE_CHECKING = False
if TYPE_CHECKING:  # the agent imports no typing at run time (see report.Check)
    from typing import Any, Dict

ID = "node.kubernetes.labels"
PRODUCT = "nvidia.com/gpu.product"
MEMORY = "nvidia.com/gpu.memory"
#: NVML reports a little less memory than the datasheet (H200: 143771 MiB for 141 GB; H100 80GB: 81559 MiB).
MEMORY_TOLERANCE = 0.10


def _wrong(found: Dict[str, str], want: Dict[str, Any]) -> list:
    wrong = [f"{key}={found.get(key)!r} (want {value!r})" for key, value in sorted((want.get("exact") or {}).items())
             if found.get(key) != value]
    products = want.get("products") or []
    product = found.get(PRODUCT)
    if products and not any(product == p or (product or "").startswith(p + "-") for p in products):
        wrong.append(f"{PRODUCT}={product!r} (want one of {', '.join(products)})")
    memory = want.get("memory_mib")
    if memory:
        try:
            seen = int(found.get(MEMORY) or "")
        except ValueError:
            seen = None
        if seen is None or abs(seen - memory) > memory * MEMORY_TOLERANCE:
            wrong.append(f"{MEMORY}={found.get(MEMORY)!r} (want about {memory} MiB)")
    return wrong


def labels_check(node_json: Any, error: Any, expect: Dict[str, Any]) -> Check:
    """Compare the Node's GFD labels with the expectations' ``kubernetes.labels`` (skipped when there are none)."""
    want = (expect.get("kubernetes") or {}).get("labels") or {}
    if not want:
        return skipped(ID, "GPU Feature Discovery labels are not expected (kubernetes.node_feature_discovery off)")
    if error:
        return failed(ID, None, want, error)
    labels = ((node_json or {}).get("metadata") or {}).get("labels") or {}
    keys = set(want.get("exact") or {}) | ({PRODUCT} if want.get("products") else set()) | (
        {MEMORY} if want.get("memory_mib") else set())
    measured = {key: labels.get(key) for key in sorted(keys)}
    wrong = _wrong(labels, want)
    return judge(ID, not wrong, measured, want, "labels differ: " + ", ".join(wrong))
