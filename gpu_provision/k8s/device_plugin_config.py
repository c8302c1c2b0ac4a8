"""Derived per-node configuration shared by ``plan``, the stages and drift checks."""

from __future__ import annotations

from typing import Any

from gpu_provision.spec.model import Node


def device_plugin_config(node: Node) -> dict[str, Any]:
    """The NVIDIA device plugin ``version: v1`` config for ``node`` (k8s-device-plugin ``api/config/v1``)."""
    config: dict[str, Any] = {"version": "v1", "flags": {"migStrategy": node.device_plugin.mig_strategy}}
    sharing = node.sharing
    if sharing.strategy != "none":
        key = "timeSlicing" if sharing.strategy == "time-slicing" else "mps"
        config["sharing"] = {key: {"renameByDefault": sharing.rename_by_default,
                                   "resources": [{"name": "nvidia.com/gpu", "replicas": sharing.replicas}]}}
    return config
