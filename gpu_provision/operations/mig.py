"""The MIG layout operation: compare the node's GPUs with the cluster file's layouts, apply only the difference.

The decision is :func:`gpu_provision.mig.plan.mig_actions` on the node's probed ``mig`` section; the change itself is
made on the node by the installed applier (the node bundle's ``mig-apply apply``), which re-checks the node, stops
and restarts the services holding the GPUs, finishes pending MIG mode changes (GPU reset, else a reboot where the
file allows it), regenerates the CDI spec and restarts the Kubernetes plugin that lists the GPUs (the device plugin,
or the DRA kubelet plugin). A node in use by user processes fails with
their pids and names unless ``mig.allow_drain`` is set.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyinfra import host, logger
from pyinfra.api import operation

from gpu_provision.mig import install as agent_mig
from gpu_provision.mig.plan import mig_actions
from gpu_provision.node.mig.holders import MODE_HOLDERS, holding
from gpu_provision.node.mig.layout import DEFAULT_PLUGIN, Action
from gpu_provision.operations.commands import current_state, fail_command, mark_changed
from gpu_provision.spec.model import Node
from gpu_provision.state import NodeStateData, Request

REQUEST = Request(sections={"system", "mig"}, units=set(MODE_HOLDERS))
#: What happens to a layout that waits for a reboot.
UNIT_AT_BOOT = f"{agent_mig.UNIT_NAME} applies it at boot"


def active_units(state: NodeStateData) -> set[str]:
    """The GPU-holding services that run on the node now."""
    units = {name: state.unit(name) for name in MODE_HOLDERS}
    return holding({name: unit.active for name, unit in units.items() if unit is not None and unit.loaded})


def node_actions(node: Node, state: NodeStateData, plugin: str | None = DEFAULT_PLUGIN) -> list[Action]:
    """The MIG actions ``node`` needs, given its probed state; ``plugin`` is restarted after a change."""
    return mig_actions(node.mig.planned, state.section("mig"), active_units=active_units(state),
                       allow_drain=node.mig.allow_drain, plugin=plugin)


def commands_for(node: Node, actions: list[Action], plugin: str | None = DEFAULT_PLUGIN) -> list[str]:
    """Shell commands for ``actions``: one failing command naming the refusals, or the applier run.

    A node whose ``nvidia-smi`` could not answer (no driver yet, at prepare time of a first run) gets the applier
    run: it reads the node again when it runs, after the driver stage, and fails with the driver's message if the
    driver still does not answer.
    """
    refusals = [a for a in actions if a.kind == "refuse" and a.gpu is not None]
    if refusals:
        return [fail_command("; ".join(str(a) for a in refusals))]
    return [agent_mig.apply_command(node, "apply", plugin)] if actions else []


@operation()
def layout(node: Node, request: Request | None = None,
           waits_for: Callable[[NodeStateData], str | None] | None = None,
           plugin: str | None = DEFAULT_PLUGIN) -> Any:
    """MIG mode, GPU instances and compute instances of every GPU of ``node`` as its layouts say.

    + node: the typed node (``node.mig.planned``: the layouts the resolve step planned)
    + request: extra probe request to merge (the stage's whole request, so one probe serves all)
    + waits_for: takes the node's state, returns why the layout cannot be applied in this run (a driver reboot
      pending: the new driver's library beside the old module fails every nvidia-smi call with "Driver/library
      version mismatch"), or None; the boot unit applies the layout after that reboot
    + plugin: the Kubernetes plugin restarted after a change (:func:`gpu_provision.mig.install.plugin_for`)

    The applier and the layout file must be installed first (``stages.mig`` does that). Yields nothing when every
    GPU already has its layout.

    .. code:: python

        mig.layout(name="MIG layout", node=node_for(host))
    """
    state = current_state(host, REQUEST.merge(request or Request()))
    waiting = waits_for(state) if waits_for else None
    if waiting:
        host.log_styled(f"MIG layout waits for the reboot ({waiting}): {UNIT_AT_BOOT}", fg="yellow",
                        log_func=logger.warning)
        host.noop(f"MIG layout waits for the reboot: {waiting}")
        return
    actions = node_actions(node, state, plugin)
    if not actions:
        host.noop(f"MIG layout of {len(node.mig.layouts)} GPU(s) already as wanted")
        return
    mark_changed(host)
    yield from commands_for(node, actions, plugin)
