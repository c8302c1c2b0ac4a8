"""Stage: MIG layouts and vGPU types, kept across reboots.

Wants: the node bundle, whose ``mig-apply`` entry is the applier (``/usr/local/lib/gpu-provision/``), the node's
layout in mig-parted ``version: v1`` format (``/etc/gpu-provision/mig-layout.yaml``, written as JSON so the standard
library reads it and a site running NVIDIA's mig-manager can use the same file), the vGPU file on vGPU hosts, and
``gpu-provision-mig.service``, which applies both at boot before the container runtime and kubelet start. Its own
differences: per-GPU layout drift (``GPU 0: expected 2g.35gb@0:2, ...; found ...``) and vGPU types. Nodes without
MIG layouts or vGPU types are left alone.
"""

from __future__ import annotations

from dataclasses import replace

from pyinfra import host, logger
from pyinfra.api import deploy

from gpu_provision import bundle, kernel_guard
from gpu_provision.desired import Difference, FileWant, UnitWant, Want, request_for
from gpu_provision.inventory import cluster_for, node_for
from gpu_provision.mig import install as agent_mig
from gpu_provision.mig.plan import layout_drift
from gpu_provision.node.mig import vgpu as vgpu_plan
from gpu_provision.node.mig.holders import MODE_HOLDERS
from gpu_provision.node.mig.record import RECORD_FILE
from gpu_provision.operations import commands, files
from gpu_provision.operations import mig as mig_ops
from gpu_provision.operations import vgpu as vgpu_ops
from gpu_provision.operations.commands import current_state
from gpu_provision.spec.model import Cluster, Node
from gpu_provision.stages import driver
from gpu_provision.state import NodeStateData, Request

NAME = "mig"


def managed(node: Node) -> bool:
    """Whether this stage manages ``node`` (it has MIG layouts or vGPU types)."""
    return bool(node.mig.layouts or node.vgpu)


def file_wants(node: Node) -> list[FileWant]:
    """The node bundle (the applier), the layout and vGPU files, and the boot unit."""
    if not managed(node):
        return []
    out = [FileWant(bundle.BUNDLE_PATH, content=bundle.build(), mode="0755", backup=False)]
    if node.mig.layouts:
        out.append(FileWant(agent_mig.LAYOUT_FILE, content=agent_mig.layout_text(node)))
    if node.vgpu:
        out.append(FileWant(agent_mig.VGPU_FILE, content=agent_mig.vgpu_text(node)))
    out.append(FileWant(agent_mig.UNIT_PATH, content=agent_mig.unit_text(node)))
    return out


def wants(node: Node, cluster: Cluster, state: NodeStateData | None = None) -> list[Want]:
    """Files and the boot unit (enabled; it is a oneshot that has run when the node booted with the layout)."""
    found: list[Want] = list(file_wants(node))
    if found:
        found.append(UnitWant(agent_mig.UNIT_NAME, enabled=True, running=None))
    return found


def request(node: Node, cluster: Cluster) -> Request:
    """Files and units of :func:`wants`, the GPU-holding services, and the probe's ``mig`` section."""
    if not managed(node):
        return Request()
    req = request_for(wants(node, cluster))
    req.sections.add("mig")
    req.units.update(MODE_HOLDERS)
    if node.mig.layouts:
        req.files.add(RECORD_FILE)
    return req


def interrupted_apply(state: NodeStateData) -> str | None:
    """Why the applier must run although the GPUs may have their layout: an earlier apply was cut off (``kill -9``,
    a lost node) and its record names units or kernel modules still down (None when there is no record)."""
    if state.file(RECORD_FILE).exists:
        return f"an interrupted MIG apply left units or kernel modules down ({RECORD_FILE})"
    return None


def extra_differences(node: Node, cluster: Cluster, state: NodeStateData) -> list[Difference]:
    """Per-GPU MIG layout drift and vGPU type drift."""
    if not managed(node):
        return []
    section = state.section("mig")
    out: list[Difference] = []
    if node.mig.layouts:
        for drift in layout_drift(node.mig.planned, section):
            out.append(Difference("mig-layout", f"GPU {drift.gpu}", str(drift.expected), drift.found_text, NAME))
    if node.vgpu:
        for step in vgpu_plan.plan_vgpu(dict(node.vgpu), section):
            out.append(Difference("vgpu", f"GPU {step.gpu}", node.vgpu.get(step.gpu, ""), _vgpu_found(step, section),
                                  NAME))
    return out


def _vgpu_found(step: vgpu_plan.VgpuAction, section: dict) -> str:
    if step.kind == "refuse":
        return step.reason
    if step.kind == "enable-vfs":
        return "virtual functions not enabled"
    pf = (section.get("vgpu") or {}).get(step.address) or {}
    held = vgpu_plan.held(pf, section.get("vgpu_known_types") or {})
    if step.kind == "clear":
        return f"VF {step.address} holds vGPU type {step.type_id}"
    return f"{len(held)} vGPU(s) held; VF {step.address} still offers the type"


def reboot_refused(node: Node, state: NodeStateData) -> str | None:
    """Why the MIG applier may not reboot ``node`` although the file allows it: the kernel guard (None: it may)."""
    if node.driver.reboot != "allowed":
        return None
    return kernel_guard.blocked_reboot(node, state, dkms=not driver.precompiled(state))


def reboot_guarded(node: Node, state: NodeStateData) -> Node:
    """``node`` as the applier should see it: without permission to reboot while the kernel guard refuses one
    (the applier then stops with the GPU reset's reason instead of booting a kernel without the driver)."""
    if reboot_refused(node, state) is None:
        return node
    return replace(node, driver=replace(node.driver, reboot="never"))


def _unit_needed(state: NodeStateData) -> str | None:
    unit = state.unit(agent_mig.UNIT_NAME)
    if unit is None or not unit.loaded:
        return "not installed"
    if agent_mig.UNIT_PATH in files.changed_paths(host):
        return "unit file changed"
    return None if unit.enabled == "enabled" else f"is {unit.enabled or 'disabled'}"


@deploy("MIG layout and vGPU types")
def mig_stage() -> None:
    """Install the applier, the layout files and the boot unit, then apply the layout and the vGPU types."""
    node = node_for(host)
    cluster = cluster_for(host)
    if not managed(node):
        host.noop("no MIG layout or vGPU types for this node")
        return
    req = request(node, cluster)
    files.wants(name="MIG applier, layout files and boot unit", wants=file_wants(node), request=req)
    commands.guarded(
        name="Enable gpu-provision-mig.service (systemd reads it again when it changed)",
        command=f"systemctl daemon-reload && systemctl enable {agent_mig.UNIT_NAME}",
        needed=_unit_needed,
        request=Request(units={agent_mig.UNIT_NAME}),
        noop=f"{agent_mig.UNIT_NAME} enabled",
    )
    if node.mig.layouts:
        target = commands.this_host()
        state = current_state(target, req.merge(Request(sections={"system"})))
        refused = reboot_refused(node, state)
        if refused:
            target.log_styled(f"MIG apply may not reboot: {refused}", fg="yellow", log_func=logger.warning)
        guarded = reboot_guarded(node, state)
        # The driver's readings too: a layout waits while the installed driver is not (or, once this run's driver
        # step is done, will not be) the loaded one; the boot unit applies it after the reboot.
        plugin = agent_mig.plugin_for(cluster)
        mig_ops.layout(name="MIG layout", node=guarded, request=req.merge(driver.request(node, cluster)),
                       waits_for=lambda s: driver.pending_reboot(node, s), plugin=plugin)
        commands.guarded(
            name="Finish an interrupted MIG apply (bring back what it took down)",
            command=agent_mig.apply_command(node, "apply", plugin),
            needed=interrupted_apply,
            request=Request(files={RECORD_FILE}),
            noop="no interrupted MIG apply",
        )
    if node.vgpu:
        vgpu_ops.types(name="vGPU types", node=node, request=req)
