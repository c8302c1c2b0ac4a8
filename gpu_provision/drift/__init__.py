"""Drift checks: how each node differs from the cluster file, from one batched probe per node.

:mod:`.stages` finds the stage modules to compare, :mod:`.compare` turns one node's probe answer into
differences, :mod:`.collect` is the per-node check the fleet runner (:mod:`gpu_provision.fleet`) runs on every
reached node, and :mod:`.report` holds the result, its text and JSON forms and the exit status.
"""

from gpu_provision.drift.collect import check_fleet
from gpu_provision.drift.compare import node_differences, node_request
from gpu_provision.drift.report import FleetReport, NodeReport
from gpu_provision.drift.stages import Stage, load_stages

__all__ = [
    "FleetReport",
    "NodeReport",
    "Stage",
    "check_fleet",
    "load_stages",
    "node_differences",
    "node_request",
]
