"""The cluster file's side of NVIDIA mig-parted ``version: v1`` files: its typed layouts in, exported documents out.

Reading, checking and writing the format is :mod:`gpu_provision.node.mig.migparted` (the one implementation,
shared with the node applier, which reads the layout file the deploy writes); this module connects it to the cluster
model: a config's entries for a node's GPU model become :class:`MigLayout` values, and nodes' layouts become
configs for ``gpu-provision export mig-parted`` and the layout file.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpu_provision.node.mig import migparted
from gpu_provision.spec.catalog import GpuModel
from gpu_provision.spec.model import MigLayout, Node

__all__ = ["export", "layouts_for", "node_config"]


def layouts_for(doc: dict[str, Any], config: str, model: GpuModel, count: int) -> dict[int, MigLayout]:
    """The per-GPU layouts that config ``config`` gives ``count`` GPUs of ``model`` (later entries win)."""
    gpus = [(index, model.pci_device_ids) for index in range(count)]
    return {index: replace(want, config_name=config) for index, want in migparted.requested(doc, config, gpus).items()}


def node_config(node: Node, model: GpuModel | None) -> list[dict[str, Any]]:
    """The mig-parted entries describing ``node``'s layouts (GPUs with equal layouts share an entry)."""
    return migparted.entries(node.mig.layouts, model.pci_device_ids if model else (), node.gpus.count)


def export(nodes: list[tuple[Node, GpuModel | None]]) -> dict[str, Any]:
    """A mig-parted document with one config per node that manages MIG, named after the node."""
    return migparted.document({node.name: node_config(node, model) for node, model in nodes if node.mig.layouts})
