"""The labels and taints each node should carry in Kubernetes."""

from __future__ import annotations

import hashlib
import re

from gpu_provision.k8s.device_plugin_config import device_plugin_config
from gpu_provision.spec.catalog import model as gpu_model
from gpu_provision.spec.model import Node

#: The node label the device plugin's config-manager reads to pick the node's config from the ConfigMap.
CONFIG_LABEL = "nvidia.com/device-plugin.config"
#: Set on nodes whose GPUs Kubernetes schedules; the device plugin and DCGM exporter run only there.
PRESENT_LABEL = "nvidia.com/gpu.present"
PRODUCT_LABEL = "nvidia.com/gpu.product"
COUNT_LABEL = "nvidia.com/gpu.count"
MIG_LAYOUT_LABEL = "gpu-provision/mig-layout"
#: Where NVIDIA's MPS control daemon runs (GPU feature discovery sets it; this project sets it from the file).
MPS_LABEL = "nvidia.com/mps.capable"

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_TAINT = re.compile(r"^(?P<key>[^=:]+)(=(?P<value>[^:]*))?:(?P<effect>NoSchedule|PreferNoSchedule|NoExecute)$")


def label_value(text: str) -> str:
    """``text`` made a valid label value (at most 63 characters of ``[-A-Za-z0-9_.]``); long or odd values become a
    readable prefix and a hash."""
    cleaned = re.sub(r"[^-A-Za-z0-9_.]+", "-", text).strip("-_.")
    if len(cleaned) <= 63 and _LABEL_VALUE.match(cleaned):
        return cleaned
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return f"{cleaned[:40].strip('-_.')}-{digest}"


def taint_objects(taints: tuple[str, ...]) -> list[dict[str, str]]:
    """``key=value:Effect`` strings as Kubernetes taint objects."""
    out = []
    for text in taints:
        match = _TAINT.match(text)
        if not match:
            raise ValueError(f"taint {text!r} is not key[=value]:NoSchedule|PreferNoSchedule|NoExecute")
        taint = {"key": match["key"], "effect": match["effect"]}
        if match["value"]:
            taint["value"] = match["value"]
        out.append(taint)
    return out


def tolerations(taints: tuple[str, ...]) -> list[dict[str, str]]:
    """Tolerations of ``key[=value]:Effect`` taints: ``Exists`` for a key alone (any value), ``Equal`` for a value."""
    out = []
    for taint in taint_objects(taints):
        toleration = {"key": taint["key"], "operator": "Equal" if "value" in taint else "Exists"}
        if "value" in taint:
            toleration["value"] = taint["value"]
        toleration["effect"] = taint["effect"]
        out.append(toleration)
    return out


def plugin_config_name(node: Node) -> str:
    """The ConfigMap key of the node's device plugin config; nodes with equal configs share one key."""
    config = device_plugin_config(node)
    parts = []
    strategy = config["flags"]["migStrategy"]
    if strategy != "none":
        parts.append(f"mig-{strategy}")
    for kind, settings in sorted(config.get("sharing", {}).items()):
        replicas = settings["resources"][0]["replicas"]
        name = "time-slicing" if kind == "timeSlicing" else kind
        parts.append(f"{name}-{replicas}" + ("-renamed" if settings.get("renameByDefault") else ""))
    return "-".join(parts) or "default"


def mig_layout_summary(node: Node) -> str | None:
    """A label value describing the node's MIG layout (``all.2x1g.18gb.1x3g.71gb``, ``g0-6.1x7g.141gb_g7.off``),
    None when the file sets no MIG layout."""
    if not node.mig.layouts:
        return None
    groups: dict[str, list[int]] = {}
    for index, layout in sorted(node.mig.layouts.items()):
        text = ".".join(f"{n}x{p.replace('+', '')}" for p, n in sorted(layout.profiles.items()) if n) \
            if layout.enabled else "off"
        groups.setdefault(text or "empty", []).append(index)
    parts = []
    for text, indexes in sorted(groups.items(), key=lambda item: item[1][0]):
        if len(indexes) == node.gpus.count and len(groups) == 1:
            where = "all"
        elif indexes == list(range(indexes[0], indexes[-1] + 1)) and len(indexes) > 1:
            where = f"g{indexes[0]}-{indexes[-1]}"
        else:
            where = "g" + ".".join(str(i) for i in indexes)
        parts.append(f"{where}.{text}")
    return label_value("_".join(parts))


def schedules_gpus(node: Node) -> bool:
    """Whether Kubernetes schedules the node's GPUs (GPUs expected and not handed to VMs as vGPUs)."""
    return node.has_gpus and not node.vgpu


def labels(node: Node) -> dict[str, str]:
    """Every label the node should carry: the file's, plus GPU model, count, MIG layout and plugin config."""
    out: dict[str, str] = {}
    if schedules_gpus(node):
        out[PRESENT_LABEL] = "true"
        out[COUNT_LABEL] = str(node.gpus.count)
        out[CONFIG_LABEL] = plugin_config_name(node)
        known = gpu_model(node.gpus.model) if node.gpus.model else None
        # GPU feature discovery's form: the product name nvidia-smi prints, spaces as dashes.
        out[PRODUCT_LABEL] = label_value(known.product_names[0] if known else str(node.gpus.model))
        layout = mig_layout_summary(node)
        if layout is not None:
            out[MIG_LAYOUT_LABEL] = layout
        if node.sharing.strategy == "mps":
            out[MPS_LABEL] = "true"
    out.update(node.labels)
    return out
