"""The ordered stages of a GPU node and what they need from the node, all together.

The host stack (preflight, driver, runtime, toolkit, permissions) is always there; ``mig``, ``kubernetes`` and
``verify`` join when their modules are installed. Each stage module offers ``request(node, cluster)``,
``wants(node, cluster, state)``, optionally ``extra_differences(...)``, and one ``@deploy`` function named
``<stage>_stage`` (or the stage's own name, or ``DEPLOY``). :data:`STAGES` is what ``gpu-provision drift`` compares
(:mod:`gpu_provision.drift`) and :func:`gpu_node` what ``deploys/gpu_node.py`` runs, so both see the same stages in
the same order.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from pyinfra import host
from pyinfra.api import deploy

from gpu_provision.desired import Want
from gpu_provision.errors import GpuProvisionError
from gpu_provision.inventory import cluster_for, node_for
from gpu_provision.operations import commands, repos
from gpu_provision.spec.model import Cluster, Node
from gpu_provision.state import NodeStateData, Request

PACKAGE = "gpu_provision.stages"
#: Comma-separated stage names to run instead of all of them (``preflight,driver``).
STAGES_ENV = "GPU_PROVISION_STAGES"
HOST_STACK = ("preflight", "driver", "runtime", "toolkit", "permissions")
OPTIONAL = ("mig", "kubernetes", "verify")


def _present(name: str) -> bool:
    return importlib.util.find_spec(f"{PACKAGE}.{name}") is not None


#: Stage module names in the order a node is brought up (optional ones only where their module exists).
STAGES: list[str] = [*HOST_STACK, *(name for name in OPTIONAL if _present(name))]


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


def deploy_function(module: ModuleType) -> Callable[[], Any]:
    """A stage module's ``@deploy`` function: ``DEPLOY``, else ``<name>_stage``, else ``<name>``."""
    name = module.__name__.rsplit(".", 1)[-1]
    for candidate in (getattr(module, "DEPLOY", None), getattr(module, f"{name}_stage", None),
                      getattr(module, name, None)):
        if callable(candidate):
            return candidate
    raise AttributeError(f"stage {name} has no deploy function ({name}_stage)")


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


@deploy("GPU node")
def gpu_node(stages: Sequence[str] | None = None) -> None:
    """Bring one node to the cluster file's state: stages in order, one probe per phase when converged.

    + stages: the stage names to run (default: ``GPU_PROVISION_STAGES``, else :data:`STAGES`; :data:`HOST_STACK`
      for the host stack alone); preflight always runs first, then the package proxy is set
    """
    names = chosen_stages(stages)
    node, cluster = node_for(host), cluster_for(host)
    commands.use_request(commands.this_host(), node_request(node, cluster))
    deploy_function(importlib.import_module(f"{PACKAGE}.preflight"))()
    repos.proxy(name="Package proxy", url=cluster.mirrors.package_proxy)
    # pyinfra orders operations by the line numbers of their call stack, without file names: two stages with an
    # operation at the same lines would share one operation hash, and hosts that skip one of them would order the
    # shared hashes differently (a cycle). host.loop adds the stage's position to every operation's order.
    for name in host.loop([s for s in names if s != "preflight"]):
        deploy_function(importlib.import_module(f"{PACKAGE}.{name}"))()
