"""containerd's drop-in for the nvidia runtime, as ``nvidia-ctk runtime configure --drop-in-config`` writes it
(toolkit 1.18 and later), rendered on the controller so the deploy and drift compare one exact file.

What NVIDIA's ``nvidia-ctk`` does, and why it is followed: the drop-in starts from the whole CRI plugin section of
the configuration containerd reads, because containerd before 2.1 replaces a plugin section from an imported file
instead of merging it (containerd#5837): a drop-in holding only the nvidia runtime would drop runc's settings. The
nvidia runtime takes the low-level runtime's (runc's) options and adds ``BinaryName``; ``default_runtime_name`` and
``enable_cdi`` follow ``toolkit.default_runtime`` and ``toolkit.cdi``. One difference: the CRI section is read
from the configuration as this project leaves it (``config.toml`` and, on containerd 2.x, its own runc drop-in),
not from ``config.toml`` alone, so the nvidia runtime keeps systemd cgroups where ``config.toml`` holds no runc.
"""

from __future__ import annotations

import copy
from typing import Any

import tomlkit

from gpu_provision.spec import toolkit as toolkit_mode
from gpu_provision.spec.model import Cluster, Node
from gpu_provision.stages import runtime
from gpu_provision.state import NodeStateData

HEADER = "# Managed by gpu-provision: the nvidia runtime, as nvidia-ctk runtime configure --drop-in-config writes it\n"


def _plugin_section(text: str, plugin: str) -> dict[str, Any]:
    try:
        doc = tomlkit.parse(text).unwrap()
    except Exception:  # a broken file contributes nothing; containerd itself reports why
        return {}
    section = (doc.get("plugins") or {}).get(plugin)
    return copy.deepcopy(section) if isinstance(section, dict) else {}


def _merge(into: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)
    return into


def applies(node: Node, cluster: Cluster) -> bool:
    """Whether the deploy writes the drop-in on ``node``: a GPU node whose toolkit uses drop-ins and whose
    containerd this project configures."""
    return (node.has_gpus and toolkit_mode.drop_in(node)
            and "containerd" in runtime.runtimes(node, cluster))


def text(node: Node, cluster: Cluster, state: NodeStateData) -> str | None:
    """The drop-in's text, or None where the older whole-file path applies (toolkit before 1.18, no containerd,
    or a version 1 ``config.toml``, which containerd reads without imports)."""
    if not applies(node, cluster):
        return None
    top = runtime.desired_containerd_config(state, import_dropins=True)
    version = runtime.config_version(top)
    if version == 1:
        return None
    plugin = toolkit_mode.cri_plugin(version)
    section = _plugin_section(top, plugin)
    if runtime.containerd_major_or_default(state) >= 2:
        _merge(section, _plugin_section(runtime.containerd_dropin(), plugin))
    containerd = section.setdefault("containerd", {})
    runtimes = containerd.setdefault("runtimes", {})
    nvidia = copy.deepcopy(runtimes.get("runc") or {"runtime_type": "io.containerd.runc.v2"})
    nvidia.setdefault("options", {})["BinaryName"] = toolkit_mode.runtime_binary()
    runtimes[toolkit_mode.runtime_name()] = nvidia
    if node.toolkit.default_runtime:
        containerd["default_runtime_name"] = toolkit_mode.runtime_name()
    elif containerd.get("default_runtime_name") == toolkit_mode.runtime_name():
        del containerd["default_runtime_name"]
    if node.toolkit.cdi:
        section["enable_cdi"] = True
    return HEADER + tomlkit.dumps({"version": version, "plugins": {plugin: section}})
