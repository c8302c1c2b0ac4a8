"""The vGPU operation: SR-IOV virtual functions enabled and the cluster file's vGPU types on them.

The decision is :func:`gpu_provision.node.mig.vgpu.plan_vgpu` on the node's probed ``mig`` section (its sysfs part); the
applier (the node bundle's ``mig-apply vgpu``) makes the change step by step, probing again after each write because
the driver changes what the other virtual functions offer.
"""

from __future__ import annotations

from typing import Any

from pyinfra import host
from pyinfra.api import operation

from gpu_provision.mig import install as agent_mig
from gpu_provision.node.mig.vgpu import VgpuAction, plan_vgpu
from gpu_provision.operations.commands import current_state, fail_command, mark_changed
from gpu_provision.spec.model import Node
from gpu_provision.state import NodeStateData, Request

REQUEST = Request(sections={"system", "mig"})


def node_steps(node: Node, state: NodeStateData) -> list[VgpuAction]:
    """The next vGPU steps ``node`` needs, given its probed state."""
    return plan_vgpu(dict(node.vgpu), state.section("mig"))


def commands_for(node: Node, steps: list[VgpuAction]) -> list[str]:
    """One failing command naming the refusals, or the applier run."""
    refusals = [s for s in steps if s.kind == "refuse"]
    if refusals:
        return [fail_command("; ".join(str(s) for s in refusals))]
    return [agent_mig.apply_command(node, "vgpu")] if steps else []


@operation()
def types(node: Node, request: Request | None = None) -> Any:
    """vGPU types of ``node.vgpu`` on the GPUs' virtual functions, checked against the types each GPU offers.

    + node: the typed node (``node.vgpu``: GPU index -> type name such as ``NVIDIA H200X-141C``)
    + request: extra probe request to merge

    .. code:: python

        vgpu.types(name="vGPU types", node=node_for(host))
    """
    state = current_state(host, REQUEST.merge(request or Request()))
    steps = node_steps(node, state)
    if not steps:
        host.noop("vGPU types already as wanted: " + ", ".join(f"GPU {i}: {t}" for i, t in sorted(node.vgpu.items())))
        return
    mark_changed(host)
    yield from commands_for(node, steps)
