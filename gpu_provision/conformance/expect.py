"""What the cluster file wants of one node, from the same stage wants the deploy converges (no network here).

The conformance suite's fixtures hand in the cluster, the host's name and the probe's answer; everything else is
derived by the stage modules themselves, so a setting added to a stage is checked here without a change.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType

from gpu_provision.desired import Want
from gpu_provision.errors import GpuProvisionError
from gpu_provision.spec import Cluster, Node
from gpu_provision.stages import permissions, pipeline, runtime, toolkit
from gpu_provision.state import NodeStateData, Request


class ConformanceError(GpuProvisionError):
    """The suite cannot check a host: it is no node of the cluster file, or its probe did not answer."""


def node_for_host(cluster: Cluster, hostname: str, named: str | None = None) -> Node:
    """The cluster file's node a host is: ``named`` (``--cluster-node``) if given, else the node whose name or address is
    the host spec's hostname."""
    wanted = named or hostname
    for node in cluster.nodes:
        if wanted in (node.name, node.address):
            return node
    how = f"--cluster-node {named}" if named else f"host {hostname!r}"
    raise ConformanceError(f"{how} is no node of the cluster file (nodes: "
                           f"{', '.join(f'{n.name} ({n.address})' for n in cluster.nodes)}); "
                           "name the node with --cluster-node NAME")


def stage_modules() -> list[tuple[str, ModuleType]]:
    """The stages that describe node state (``request`` and ``wants``), by name, in pipeline order."""
    modules = [(name, importlib.import_module(f"{pipeline.PACKAGE}.{name}")) for name in pipeline.STAGES]
    return [(name, m) for name, m in modules if callable(getattr(m, "request", None))
            and callable(getattr(m, "wants", None))]


def probe_request(node: Node, cluster: Cluster) -> Request:
    """What the probe must read for every stage to work out its wants on ``node`` (one remote command)."""
    request = pipeline.node_request(node, cluster)
    request.contents |= request.files
    return request


@dataclass
class Expected:
    """What the cluster file says one node should have."""

    node: Node
    cluster: Cluster
    #: Each stage's wants (packages, files, units, groups), by stage name, in pipeline order.
    by_stage: dict[str, list[Want]] = field(default_factory=dict)
    #: Device file -> (gid, mode) it should have (GPU nodes; the driver's defaults unless the file changes them).
    devices: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: Container runtimes that must have the nvidia runtime registered (empty on nodes without GPUs).
    nvidia_runtimes: tuple[str, ...] = ()
    #: The package manager the probe found (``apt``, ``dnf``), for holds.
    package_manager: str | None = None


def expected_for(node: Node, cluster: Cluster, state: NodeStateData) -> Expected:
    """Everything the suite checks on ``node``, given the probe's answer ``state``."""
    return Expected(
        node=node, cluster=cluster,
        by_stage={name: list(module.wants(node, cluster, state)) for name, module in stage_modules()},
        devices=permissions.device_targets(node, state) if node.has_gpus else {},
        nvidia_runtimes=runtime.runtimes(node, cluster) if toolkit.managed(node) else (),
        package_manager=state.package_manager,
    )
