"""Reading and writing NVIDIA mig-parted ``version: v1`` files.

The format (NVIDIA/mig-parted ``api/spec/v1``, also used by the GPU Operator's MIG manager)::

    version: v1
    mig-configs:
      all-balanced:
        - device-filter: ["0x233510DE"]
          devices: all
          mig-enabled: true
          mig-devices: {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}

A config is a list of entries; an entry applies to the GPUs whose PCI device id is in ``device-filter`` (all GPUs
when absent) and whose index is in ``devices`` (``all`` or a list of indexes).
"""

from __future__ import annotations

from typing import Any

from gpu_provision.spec.catalog import GpuModel
from gpu_provision.spec.model import MigLayout, Node

ENTRY_KEYS = {"devices", "device-filter", "mig-enabled", "mig-devices"}


def check_document(doc: Any) -> list[tuple[tuple[str | int, ...], str]]:
    """Problems of a mig-parted document as (path, message) pairs; empty when it is valid."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    if not isinstance(doc, dict):
        return [((), "a mig-parted file must be a mapping with 'version' and 'mig-configs'")]
    for key in doc:
        if key not in ("version", "mig-configs"):
            problems.append(((key,), f"unknown key '{key}' (allowed: version, mig-configs)"))
    if doc.get("version") != "v1":
        problems.append((("version",), f"{doc.get('version')!r} is not allowed (allowed: v1)"))
    configs = doc.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        problems.append((("mig-configs",), "must be a non-empty mapping of config name -> list of entries"))
        return problems
    for name, entries in configs.items():
        if not isinstance(entries, list) or not entries:
            problems.append((("mig-configs", name), "must be a non-empty list of entries"))
            continue
        for n, entry in enumerate(entries):
            where = ("mig-configs", name, n)
            if not isinstance(entry, dict):
                problems.append((where, "each entry must be a mapping"))
                continue
            for key in entry:
                if key not in ENTRY_KEYS:
                    problems.append(((*where, key), f"unknown key '{key}' (allowed: {', '.join(sorted(ENTRY_KEYS))})"))
            if "devices" not in entry:
                problems.append((where, "missing required key 'devices'"))
            elif entry["devices"] != "all" and not (
                isinstance(entry["devices"], list) and all(isinstance(d, int) and d >= 0 for d in entry["devices"])
            ):
                problems.append(((*where, "devices"), "must be 'all' or a list of GPU indexes"))
            if not isinstance(entry.get("mig-enabled"), bool):
                problems.append(((*where, "mig-enabled"), "missing or not a boolean"))
            devices = entry.get("mig-devices")
            if devices is not None and not isinstance(devices, dict):
                problems.append(((*where, "mig-devices"), "must be a mapping of profile -> count"))
            elif devices and entry.get("mig-enabled") is False:
                problems.append(((*where, "mig-devices"), "mig-devices given while mig-enabled is false"))
            filt = entry.get("device-filter")
            if filt is not None and not isinstance(filt, (str, list)):
                problems.append(((*where, "device-filter"), "must be a PCI device id or a list of them"))
    return problems


def layouts_for(doc: dict[str, Any], config: str, model: GpuModel, count: int) -> dict[int, MigLayout]:
    """The per-GPU layouts that config ``config`` gives ``count`` GPUs of ``model`` (later entries win)."""
    ids = {i.lower() for i in model.pci_device_ids}
    out: dict[int, MigLayout] = {}
    for entry in doc["mig-configs"][config]:
        filt = entry.get("device-filter")
        if filt is not None:
            wanted = {filt.lower()} if isinstance(filt, str) else {f.lower() for f in filt}
            if not wanted & ids:
                continue
        indexes = range(count) if entry["devices"] == "all" else [d for d in entry["devices"] if d < count]
        for index in indexes:
            out[index] = MigLayout(profiles=dict(entry.get("mig-devices") or {}), enabled=entry["mig-enabled"],
                                   config_name=config)
    return out


def node_config(node: Node, model: GpuModel | None) -> list[dict[str, Any]]:
    """The mig-parted entries describing ``node``'s layouts (GPUs with equal layouts share an entry)."""
    groups: dict[tuple[bool, tuple[tuple[str, int], ...]], list[int]] = {}
    for index, layout in sorted(node.mig.layouts.items()):
        key = (layout.enabled, tuple(sorted(layout.profiles.items())))
        groups.setdefault(key, []).append(index)
    entries = []
    for (enabled, profiles), indexes in groups.items():
        entry: dict[str, Any] = {}
        if model is not None:
            entry["device-filter"] = list(model.pci_device_ids)
        entry["devices"] = "all" if node.gpus.count and len(indexes) == node.gpus.count else indexes
        entry["mig-enabled"] = enabled
        if enabled:
            entry["mig-devices"] = dict(profiles)
        entries.append(entry)
    return entries


def export(nodes: list[tuple[Node, GpuModel | None]]) -> dict[str, Any]:
    """A mig-parted document with one config per node that manages MIG, named after the node."""
    configs = {node.name: node_config(node, model) for node, model in nodes if node.mig.layouts}
    return {"version": "v1", "mig-configs": configs}
