"""The ordered stages of a GPU node and what they need from the node, all together.

Each stage module offers ``request(node, cluster)``, ``wants(node, cluster, state)``, optionally
``extra_differences(...)``, and one ``@deploy`` function. :data:`STAGES` is what ``gpu-provision drift`` compares
(:mod:`gpu_provision.drift`) and :func:`gpu_node` what ``deploys/gpu_node.py`` runs, so both see the same stages in
the same order.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from types import ModuleType

from pyinfra import host, state
from pyinfra.api import deploy, operation

from gpu_provision.desired import Want
from gpu_provision.errors import GpuProvisionError
from gpu_provision.inventory import cluster_for, node_for
from gpu_provision.operations import commands, lock, repos
from gpu_provision.spec.model import Cluster, Node
from gpu_provision.stages import driver, kubernetes, mig, permissions, preflight, runtime, toolkit, verify
from gpu_provision.state import NodeStateData, Request

PACKAGE = "gpu_provision.stages"
#: Comma-separated stage names to run instead of all of them (``preflight,driver``).
STAGES_ENV = "GPU_PROVISION_STAGES"
HOST_STACK = ("preflight", "driver", "runtime", "toolkit", "permissions")
#: Stage module names in the order a node is brought up.
STAGES: list[str] = [*HOST_STACK, "mig", "kubernetes", "verify"]


def chosen_stages(names: Sequence[str] | None = None) -> list[str]:
    """``names``, else those in ``GPU_PROVISION_STAGES``, else every stage; unknown names are an error."""
    if names is None:
        text = os.environ.get(STAGES_ENV, "")
        names = [n.strip() for n in text.split(",") if n.strip()] or STAGES
    unknown = sorted(set(names) - set(STAGES))
    if unknown:
        raise GpuProvisionError(f"{STAGES_ENV}: unknown stage(s) {', '.join(unknown)} (stages: {', '.join(STAGES)})")
    return list(names)


def stage_modules() -> list[ModuleType]:
    """The stage modules, in order."""
    return [importlib.import_module(f"{PACKAGE}.{name}") for name in STAGES]


def _is_drift_stage(module: ModuleType) -> bool:
    return callable(getattr(module, "request", None)) and callable(getattr(module, "wants", None))


def node_request(node: Node, cluster: Cluster) -> Request:
    """Everything the probe must read for every stage of ``node``: one remote command per phase."""
    request = Request()
    for module in stage_modules():
        if _is_drift_stage(module):
            request = request.merge(module.request(node, cluster))
    return request


def node_wants(node: Node, cluster: Cluster, state: NodeStateData) -> list[Want]:
    """Every stage's generic wants for ``node``, in stage order."""
    return [w for module in stage_modules() if _is_drift_stage(module) for w in module.wants(node, cluster, state)]


@operation(is_idempotent=True)
def barrier(stage: str):
    """Nothing to change: a point every host passes before ``stage`` starts on any host.

    + stage: the stage that waits

    pyinfra orders each host's operations as called and interleaves hosts wave by wave, so a host with fewer
    operations can run ahead into the next stage. An operation every host calls from the same line is one node of
    the run's graph with all hosts' earlier operations before it: a worker verifies only after the control plane
    has labelled it and applied the device plugin.
    """
    host.noop(f"every host is ready for {stage}")
    return
    yield  # an operation is a generator


def gpu_node(stages: Sequence[str] | None = None, report_dir: str | None = "reports/verify") -> None:
    """Bring one node to the cluster file's state: stages in order, one probe per phase when converged.

    + stages: the stage names to run (default: ``GPU_PROVISION_STAGES``, else :data:`STAGES`; :data:`HOST_STACK`
      for the host stack alone); preflight always runs first, then the package proxy is set
    + report_dir: where the controller keeps each node's verification report (``<node>.json``)

    The node's run lock (:mod:`gpu_provision.operations.lock`) is taken before anything else, renewed before every
    stage and released at the end (or when the node fails): a second run on the node stops before changing it.
    Every remote command is bounded by :func:`~gpu_provision.operations.commands.deploy_timeout` (the node's
    ``ssh.command_timeout``), the probe by its own ``ssh.probe_timeout``.
    """
    _gpu_node(stages=stages, report_dir=report_dir, _timeout=commands.deploy_timeout(commands.this_host()))


@deploy("GPU node")
def _gpu_node(stages: Sequence[str] | None, report_dir: str | None) -> None:
    """:func:`gpu_node`'s stages, as one deploy whose global arguments (the command timeout) reach them all."""
    names = set(chosen_stages(stages))
    node, cluster = node_for(host), cluster_for(host)
    commands.use_request(commands.this_host(), node_request(node, cluster))
    # Each stage is called from its own line, in order. pyinfra tells operations apart by the line numbers of their
    # call stack (not file names); one calling line for every stage would let two stages share operation hashes.
    lock.release_on_failure(state)
    lock.run_lock(name="Run lock (one run at a time on this node)", stage="preflight")
    preflight.preflight_stage()
    repos.proxy(name="Package proxy", url=cluster.mirrors.package_proxy)
    if "driver" in names:
        lock.run_lock(name="Run lock renewed", stage="driver")
        driver.driver_stage()
    if "runtime" in names:
        lock.run_lock(name="Run lock renewed", stage="runtime")
        runtime.runtime_stage()
    if "toolkit" in names:
        lock.run_lock(name="Run lock renewed", stage="toolkit")
        toolkit.toolkit_stage()
    if "permissions" in names:
        lock.run_lock(name="Run lock renewed", stage="permissions")
        permissions.permissions_stage()
    if "mig" in names:
        lock.run_lock(name="Run lock renewed", stage="mig")
        mig.mig_stage()
    if "kubernetes" in names:
        barrier(name="Every node ready for Kubernetes", stage="kubernetes")
        lock.run_lock(name="Run lock renewed", stage="kubernetes")
        kubernetes.kubernetes()
    if "verify" in names:
        barrier(name="Every node ready for verification", stage="verify")
        lock.run_lock(name="Run lock renewed", stage="verify")
        verify.verify(report_dir=report_dir)
    lock.run_unlock(name="Run lock released")
