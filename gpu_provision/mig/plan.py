"""The controller's view of a MIG change: the cluster model's layouts against a node's probed ``mig`` section.

Thin typed wrappers around :mod:`gpu_provision.node.mig.layout`, which holds the decision itself (shared with the
node-side applier so both sides agree by construction).
"""

from __future__ import annotations

from typing import Any

from gpu_provision.node.mig import layout
from gpu_provision.node.mig.layout import Action
from gpu_provision.spec import mig as spec_mig
from gpu_provision.spec.catalog import GpuModel, MigTable
from gpu_provision.spec.model import MigLayout

__all__ = ["Action", "desired_placements", "layout_drift", "mig_actions", "table_dict"]


def desired_placements(desired: dict[int, MigLayout], model: GpuModel | None) -> dict[int, dict[str, Any]]:
    """Per GPU ``{"enabled", "placements"}``: the loader's planned placements, or planned here from ``model``'s table
    when a layout carries none."""
    out: dict[int, dict[str, Any]] = {}
    for index, mig_layout in desired.items():
        placements = [(p.profile, p.start, p.size) for p in mig_layout.placements]
        if mig_layout.enabled and mig_layout.profiles and not placements and model and model.mig:
            placements = [(p.profile, p.start, p.size) for p in spec_mig.plan(model.mig, mig_layout.profiles)]
        out[index] = {"enabled": mig_layout.enabled, "placements": placements}
    return out


def mig_actions(desired: dict[int, MigLayout], actual: dict[str, Any], model: GpuModel | None = None, *,
                active_units: set[str] | frozenset[str] = frozenset(), allow_drain: bool = False,
                device_plugin: bool = True) -> list[Action]:
    """The ordered actions that bring a node's GPUs from ``actual`` (the probe's ``mig`` section) to ``desired``.

    Empty when every GPU already has its layout. ``active_units`` are the node's running systemd units (holders
    among them are stopped around the change); ``allow_drain`` stops user processes instead of refusing.
    """
    return layout.plan_node(desired_placements(desired, model), actual, active_units, allow_drain, device_plugin)


def layout_drift(desired: dict[int, MigLayout], actual: dict[str, Any], model: GpuModel | None = None) -> list[str]:
    """One line per GPU whose MIG state differs: ``GPU 0: expected 2g.35gb@0:2, ...; found 7g.141gb@0:8``."""
    gpus = {g["index"]: g for g in actual.get("gpus", [])}
    lines = []
    for index, want in sorted(desired_placements(desired, model).items()):
        gpu = gpus.get(index)
        steps = layout.gpu_steps(index, want, gpu).steps
        if not steps:
            continue
        expected = layout.fmt_placements(want["placements"]) if want["enabled"] else "MIG disabled"
        if want["enabled"] and not want["placements"]:
            expected = "MIG enabled, no instances"
        lines.append(f"GPU {index}: expected {expected}; found {layout.describe_gpu(gpu)}")
    return lines


def table_dict(table: MigTable) -> dict[str, Any]:
    """A catalog MIG table in the plain form :func:`gpu_provision.node.mig.layout.plan_placements` reads."""
    return {
        "memory_slices": table.memory_slices,
        "compute_slices": table.compute_slices,
        "profiles": [{"name": p.name, "id": p.id, "memory_slices": p.memory_slices,
                      "compute_slices": p.compute_slices, "max_instances": p.max_instances,
                      "starts": list(p.starts)} for p in table.profiles],
    }
