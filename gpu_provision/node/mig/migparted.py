"""NVIDIA mig-parted ``version: v1`` documents: the one reader, used by the node applier and the controller.

The format (NVIDIA/mig-parted ``api/spec/v1``, also used by the GPU Operator's MIG manager)::

    version: v1
    mig-configs:
      all-balanced:
        - device-filter: ["0x233510DE"]
          devices: all
          mig-enabled: true
          mig-devices: {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}

A config is a list of entries; an entry applies to the GPUs whose PCI device id is in ``device-filter`` (all GPUs
when absent) and whose index is in ``devices`` (``all`` or a list of indexes); later entries win, as in mig-parted.

The layout file the deploy writes holds instance counts only, never placements: mig-parted rejects unknown keys, so
the file stays one a site's mig-parted or MIG manager can apply too. Placements are implied instead: the node plans
them on the driver's own tables with the very placement search the controller uses
(:mod:`gpu_provision.node.mig.placement`), and the driver's tables equal the catalog's (tested), so the node creates
exactly the placements the controller planned, drift expects and verification checks. Node-side code: Python 3.9+,
standard library only.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from .model import MigLayout

ENTRY_KEYS = {"devices", "device-filter", "mig-enabled", "mig-devices"}

Problem = Tuple[Tuple[Union[str, int], ...], str]


def check(doc: Any) -> List[Problem]:
    """Problems of a mig-parted document as (path, message) pairs; empty when it is valid."""
    problems: List[Problem] = []
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
            problems.extend(_entry_problems(("mig-configs", name, n), entry))
    return problems


def _entry_problems(where: Tuple[Union[str, int], ...], entry: Any) -> List[Problem]:
    if not isinstance(entry, dict):
        return [(where, "each entry must be a mapping")]
    problems: List[Problem] = []
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


def read(path: str) -> Dict[str, Any]:
    """The document in file ``path`` (JSON, which is also YAML); ValueError naming the first problem if invalid."""
    with open(path) as f:
        doc = json.load(f)
    problems = check(doc)
    if problems:
        where, message = problems[0]
        at = ".".join(str(p) for p in where)
        raise ValueError(f"{path}: not a mig-parted 'version: v1' document ({at + ': ' if at else ''}{message})")
    return doc


def requested(doc: Dict[str, Any], config: Optional[str],
              gpus: Iterable[Tuple[int, Iterable[str]]]) -> Dict[int, MigLayout]:
    """Per GPU index, what config ``config`` of a checked document asks of ``gpus`` (MIG mode and counts; not yet
    planned).

    ``gpus`` are ``(index, PCI device ids)`` pairs: the probed GPUs on a node (one id each), or every index of a
    model's GPUs on the controller (all the model's ids). ``config`` may be None when the document has exactly
    one config. GPUs no entry selects are absent.
    """
    configs = doc.get("mig-configs") or {}
    if config is None:
        if len(configs) != 1:
            raise ValueError(f"the layout file has {len(configs)} configs ({', '.join(configs)}); name one")
        config = next(iter(configs))
    if config not in configs:
        raise ValueError(f"no config named {config!r} in the layout file (configs: {', '.join(configs)})")
    selected = [(index, {i.lower() for i in ids}) for index, ids in gpus]
    out: Dict[int, MigLayout] = {}
    for entry in configs[config]:
        filt = entry.get("device-filter")
        wanted = None if filt is None else {f.lower() for f in ([filt] if isinstance(filt, str) else filt)}
        for index, lowered in selected:
            if wanted is not None and not wanted & lowered:
                continue
            if entry["devices"] != "all" and index not in entry["devices"]:
                continue
            out[index] = MigLayout(dict(entry.get("mig-devices") or {}), bool(entry["mig-enabled"]))
    return out


def document(configs: Dict[str, List[Dict[str, Any]]]) -> Dict[str, Any]:
    """A ``version: v1`` document holding ``configs`` (config name -> entries)."""
    return {"version": "v1", "mig-configs": configs}


def entries(layouts: Mapping[int, MigLayout], device_ids: Iterable[str], gpu_count: int) -> List[Dict[str, Any]]:
    """The entries of one config giving GPU index -> ``layouts`` (GPUs with equal layouts share an entry).

    ``device_ids`` become each entry's ``device-filter`` (none when empty); ``devices`` is ``all`` when an entry
    covers all ``gpu_count`` GPUs.
    """
    groups: Dict[Tuple[bool, Tuple[Tuple[str, int], ...]], List[int]] = {}
    for index, layout in sorted(layouts.items()):
        groups.setdefault((layout.enabled, tuple(sorted(layout.profiles.items()))), []).append(index)
    ids = list(device_ids)
    out = []
    for (enabled, profiles), indexes in groups.items():
        entry: Dict[str, Any] = {}
        if ids:
            entry["device-filter"] = ids
        entry["devices"] = "all" if gpu_count and len(indexes) == gpu_count else indexes
        entry["mig-enabled"] = enabled
        if enabled:
            entry["mig-devices"] = dict(profiles)
        out.append(entry)
    return out
