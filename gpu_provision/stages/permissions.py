"""Who may open the GPUs: a group with its users, the driver's device-file options, and the device files now.

The driver creates ``/dev/nvidia*`` with ``NVreg_DeviceFileUID/GID/Mode`` (module options, read when the module
loads, so the initramfs is rebuilt when they change). The GID must be the group's number: the group is created
first and the options file is written from the group's id as the node reports it during execution. Device files
that exist already are given the same owner and mode at once, so no module reload is needed.

MIG capability files (``/dev/nvidia-caps/nvidia-capN``, NVIDIA MIG user guide, "Device Nodes and Capabilities")
are created by the driver's ``nvidia-modprobe`` with fixed modes, not from these options: ``nvidia-cap1``
(``mig/config``, 0400) and ``nvidia-cap2`` (``mig/monitor``, 0444) stay as the driver makes them; the GPU- and
compute-instance access capabilities (N >= 3) get the group and the read bits of the file's mode. Capabilities of
MIG instances created after this stage are set on the next run.
"""

from __future__ import annotations

import re
import shlex

from pyinfra import host
from pyinfra.api import deploy

from gpu_provision.desired import Difference, FileWant, GroupWant, Want
from gpu_provision.inventory import cluster_for, node_for
from gpu_provision.operations import accounts, commands, files
from gpu_provision.operations.commands import current_state
from gpu_provision.operations.packages import family
from gpu_provision.spec.model import Cluster, Node
from gpu_provision.stages.driver import INITRAMFS
from gpu_provision.state import NodeStateData, Request

NAME = "permissions"
MODPROBE = "/etc/modprobe.d/gpu-provision-nvidia.conf"
#: Device files the NVreg_DeviceFile* options govern.
DEVICE_FILE = re.compile(r"^/dev/(nvidia\d+|nvidiactl|nvidia-uvm|nvidia-uvm-tools)$")
#: Instance access capabilities; 1 and 2 are mig/config and mig/monitor.
INSTANCE_CAP = re.compile(r"^/dev/nvidia-caps/nvidia-cap(\d+)$")


def managed(node: Node) -> bool:
    """Whether the node's device files differ from the driver defaults (root:root 0666)."""
    return node.has_gpus and (node.permissions.group is not None or node.permissions.mode != "0666")


def group_wants(node: Node) -> list[GroupWant]:
    """The device group with the users the file names."""
    perms = node.permissions
    return [GroupWant(perms.group, tuple(perms.users))] if perms.group else []


def gid(node: Node, state: NodeStateData) -> str:
    """The group's numeric id as the node reports it (``0`` without a group; a placeholder before it exists)."""
    name = node.permissions.group
    if not name:
        return "0"
    group = state.group(name)
    return str(group["gid"]) if group else f"<gid of {name}>"


def modprobe_text(node: Node, state: NodeStateData) -> str:
    """The nvidia module options file (the mode in decimal, as the driver reads it)."""
    perms = node.permissions
    return (f"# Managed by gpu-provision: /dev/nvidia* owned by root:{perms.group or 'root'}, mode {perms.mode}\n"
            f"options nvidia NVreg_DeviceFileUID=0 NVreg_DeviceFileGID={gid(node, state)} "
            f"NVreg_DeviceFileMode={perms.mode_int}\n")


def file_wants(node: Node, state: NodeStateData) -> list[FileWant]:
    """The module options file."""
    return [FileWant(MODPROBE, content=modprobe_text(node, state))]


def wants(node: Node, cluster: Cluster, state: NodeStateData) -> list[Want]:
    """The group and the module options (nothing when the file keeps the driver defaults)."""
    if not managed(node):
        return []
    return [*group_wants(node), *file_wants(node, state)]


def request(node: Node, cluster: Cluster) -> Request:
    """The group, the options file and the GPU section (device files)."""
    if not managed(node):
        return Request()
    return Request(files={MODPROBE}, groups={node.permissions.group} if node.permissions.group else set(),
                   sections={"system", "gpu"})


def device_targets(node: Node, state: NodeStateData) -> dict[str, tuple[int, int]]:
    """Each existing device file this stage governs -> the (gid, mode) it should have."""
    name = node.permissions.group
    group = state.group(name) if name else {"gid": 0}
    if group is None:
        return {}
    mode = node.permissions.mode_int
    out = {}
    for path in state.section("gpu").get("devices", {}):
        if DEVICE_FILE.match(path):
            out[path] = (group["gid"], mode)
        cap = INSTANCE_CAP.match(path)
        if cap and int(cap.group(1)) >= 3 and name:
            out[path] = (group["gid"], mode & 0o444)
    return out


def devices_off(node: Node, state: NodeStateData) -> list[str]:
    """Device files whose group or mode differs from the file's."""
    devices = state.section("gpu").get("devices", {})
    return sorted(path for path, (want_gid, want_mode) in device_targets(node, state).items()
                  if devices[path].get("gid") != want_gid or int(devices[path].get("mode", "0"), 8) != want_mode)


def fix_devices_command(node: Node, state: NodeStateData) -> str:
    """chown/chmod for the device files that are off (evaluated against the node during execution)."""
    targets = device_targets(node, state)
    parts = [f"chown 0:{targets[p][0]} {shlex.quote(p)} && chmod {targets[p][1]:04o} {shlex.quote(p)}"
             for p in devices_off(node, state)]
    return " && ".join(parts) or "true"


def extra_differences(node: Node, cluster: Cluster, state: NodeStateData) -> list[Difference]:
    """Device files whose owner or mode is not yet what the file says."""
    if not managed(node):
        return []
    devices = state.section("gpu").get("devices", {})
    targets = device_targets(node, state)
    return [Difference("device-file", path, f"gid {targets[path][0]} mode {targets[path][1]:04o}",
                       f"gid {devices[path].get('gid')} mode {devices[path].get('mode')}", NAME)
            for path in devices_off(node, state)]


@deploy("GPU device permissions")
def permissions_stage() -> None:
    """Create the group, write the module options with its real GID, rebuild the initramfs, fix device files."""
    target = commands.this_host()
    node, cluster = node_for(host), cluster_for(host)
    if not managed(node):
        target.noop("device files keep the driver defaults (root, 0666)")
        return
    req = request(node, cluster)
    state = current_state(target, req)
    if node.permissions.group:
        accounts.wants(name=f"Group {node.permissions.group}", wants=group_wants(node))
    files.wants(name="nvidia module device-file options", wants=lambda s: file_wants(node, s), request=req)
    files.on_change(name="Rebuild the initramfs with the device-file options", paths=[MODPROBE],
                    command=INITRAMFS.get(family(state.system) or "", "true"), noop="device-file options unchanged")
    commands.guarded(name="Device files with the group and mode the file gives",
                     command=lambda s: fix_devices_command(node, s),
                     needed=lambda s: ", ".join(devices_off(node, s)) or None, request=req,
                     noop="device files already as wanted")

