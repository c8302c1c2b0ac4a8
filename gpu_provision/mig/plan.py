"""The controller's view of a MIG change: a node's planned layouts against its probed ``mig`` section.

The decision is :mod:`gpu_provision.node.mig.layout`, shared with the node applier so both sides agree by
construction. The layouts are the ones :func:`gpu_provision.spec.resolve.derive` planned once
(``node.mig.planned``); nothing here plans again.
"""

from __future__ import annotations

from typing import Any

from gpu_provision.node.mig import layout
from gpu_provision.node.mig.layout import Action, Drift
from gpu_provision.node.mig.model import GpuLayout

__all__ = ["Action", "Drift", "layout_drift", "mig_actions"]


def mig_actions(desired: dict[int, GpuLayout], actual: dict[str, Any], *,
                active_units: set[str] | frozenset[str] = frozenset(), allow_drain: bool = False,
                plugin: str | None = layout.DEFAULT_PLUGIN) -> list[Action]:
    """The ordered actions that bring a node's GPUs from ``actual`` (the probe's ``mig`` section) to ``desired``.

    Empty when every GPU already has its layout. ``active_units`` are the node's GPU-holding units that run
    (:func:`gpu_provision.node.mig.holders.holding`; they are stopped around the change); ``allow_drain`` stops
    user processes instead of refusing; ``plugin`` is the Kubernetes plugin restarted after a change
    (:func:`gpu_provision.mig.install.plugin_for`).
    """
    return layout.plan_node(desired, actual, active_units, allow_drain, plugin)


def layout_drift(desired: dict[int, GpuLayout], actual: dict[str, Any]) -> list[Drift]:
    """The GPUs whose MIG state differs, each with its expected and found layout; ``str()`` of one reads
    ``GPU 0: expected 2g.35gb@0:2, ...; found 7g.141gb@0:8``."""
    return layout.drift(desired, actual)
