"""Kernel modules that keep a GPU busy: ``nvidia_drm`` and ``nvidia_modeset`` hold the device, so a GPU reset (how
a pending MIG mode change takes effect) is refused while they are loaded.

Read from ``/sys/module/<name>/holders/`` (which modules sit on top of ``nvidia``, transitively) and
``/proc/modules`` (each one's use count). The applier unloads them for the reset only when the node allows it
(``mig.allow_module_unload``) and loads them again afterwards; otherwise its message names them. ``nvidia_uvm``
does not block a reset and is left alone. Node-side code: Python 3.9+, standard library only.
"""

from __future__ import annotations

import os
from typing import Dict, List, Tuple

#: Modules that may be unloaded for a GPU reset, in unloading order (``nvidia_drm`` uses ``nvidia_modeset``).
UNLOADABLE = ("nvidia_drm", "nvidia_modeset")


def use_counts(procfs: str = "/proc") -> Dict[str, Tuple[int, Tuple[str, ...]]]:
    """Loaded modules: name -> (use count, modules using it), from ``/proc/modules`` (empty when unreadable)."""
    try:
        with open(os.path.join(procfs, "modules")) as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        fields = line.split()
        if len(fields) >= 4 and fields[2].isdigit():
            users = tuple(u for u in fields[3].rstrip(",").split(",") if u and u != "-")
            out[fields[0]] = (int(fields[2]), users)
    return out


def holders(sysfs: str = "/sys", module: str = "nvidia") -> List[str]:
    """Modules built on ``module``, directly or through another, nearest first (``/sys/module/*/holders/``)."""
    found: List[str] = []
    queue = [module]
    while queue:
        try:
            names = sorted(os.listdir(os.path.join(sysfs, "module", queue.pop(0), "holders")))
        except OSError:
            continue
        for name in names:
            if name not in found:
                found.append(name)
                queue.append(name)
    return found


def blocking(sysfs: str = "/sys", procfs: str = "/proc") -> Tuple[str, ...]:
    """The loaded modules that block a GPU reset, in unloading order."""
    loaded = set(holders(sysfs)) | set(use_counts(procfs))
    return tuple(m for m in UNLOADABLE if m in loaded)


def describe(modules, procfs: str = "/proc") -> str:
    """``nvidia_drm (use count 2), nvidia_modeset (use count 1: nvidia_drm)`` for messages."""
    counts = use_counts(procfs)
    parts = []
    for module in modules:
        count, users = counts.get(module, (0, ()))
        parts.append(f"{module} (use count {count}" + (": " + ", ".join(users) if users else "") + ")")
    return ", ".join(parts)
