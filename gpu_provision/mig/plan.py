"""The controller's view of a MIG change: the cluster model's layouts against a node's probed ``mig`` section.

The decision is :mod:`gpu_provision.node.mig.layout`, shared with the node applier so both sides agree by
construction; this module only turns the cluster model's layouts into the :class:`GpuLayout` values it reads.
"""

from __future__ import annotations

from typing import Any

from gpu_provision.node.mig import layout
from gpu_provision.node.mig.layout import Action, Drift
from gpu_provision.node.mig.model import GpuLayout
from gpu_provision.spec import mig as spec_mig
from gpu_provision.spec.catalog import GpuModel
from gpu_provision.spec.model import MigLayout

__all__ = ["Action", "Drift", "desired_layouts", "layout_drift", "mig_actions"]


def desired_layouts(desired: dict[int, MigLayout], model: GpuModel | None) -> dict[int, GpuLayout]:
    """Per GPU, the layout to reach: the loader's planned placements, or planned here from ``model``'s table when a
    layout carries none."""
    out: dict[int, GpuLayout] = {}
    for index, mig_layout in desired.items():
        placements = mig_layout.placements
        if mig_layout.enabled and mig_layout.profiles and not placements and model and model.mig:
            placements = spec_mig.plan(model.mig, mig_layout.profiles)
        out[index] = GpuLayout(mig_layout.enabled, placements)
    return out


def mig_actions(desired: dict[int, MigLayout], actual: dict[str, Any], model: GpuModel | None = None, *,
                active_units: set[str] | frozenset[str] = frozenset(), allow_drain: bool = False,
                device_plugin: bool = True) -> list[Action]:
    """The ordered actions that bring a node's GPUs from ``actual`` (the probe's ``mig`` section) to ``desired``.

    Empty when every GPU already has its layout. ``active_units`` are the node's GPU-holding units that run
    (:func:`gpu_provision.node.mig.holders.holding`; they are stopped around the change); ``allow_drain`` stops
    user processes instead of refusing.
    """
    return layout.plan_node(desired_layouts(desired, model), actual, active_units, allow_drain, device_plugin)


def layout_drift(desired: dict[int, MigLayout], actual: dict[str, Any], model: GpuModel | None = None) -> list[Drift]:
    """The GPUs whose MIG state differs, each with its expected and found layout; ``str()`` of one reads
    ``GPU 0: expected 2g.35gb@0:2, ...; found 7g.141gb@0:8``."""
    return layout.drift(desired_layouts(desired, model), actual)
