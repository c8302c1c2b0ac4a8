"""The MIG/vGPU applier as the deploy installs it: the node bundle, the layout files it reads, the boot unit.

On a node::

    /usr/local/lib/gpu-provision/gpu-provision-node.pyz  the node bundle; its ``mig-apply`` entry is the applier
    /etc/gpu-provision/mig-layout.yaml                   the node's layout, mig-parted ``version: v1`` written as JSON
    /etc/gpu-provision/vgpu.json                         the node's vGPU types (vGPU hosts only)
    /etc/systemd/system/gpu-provision-mig.service        re-applies both at boot, before the container runtime and kubelet
    /run/gpu-provision/mig-apply.lock                    held by the one applier that runs (the boot unit, a deploy, by hand)
"""

from __future__ import annotations

import json

from gpu_provision import bundle
from gpu_provision.node.mig.layout import DEFAULT_PLUGIN
from gpu_provision.node.mig.migparted import document
from gpu_provision.spec import catalog
from gpu_provision.spec import toolkit as toolkit_facts
from gpu_provision.spec.migparted import node_config
from gpu_provision.spec.model import Cluster, Node

LAYOUT_FILE = "/etc/gpu-provision/mig-layout.yaml"
VGPU_FILE = "/etc/gpu-provision/vgpu.json"
UNIT_NAME = "gpu-provision-mig.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}"
ENTRY = "mig-apply"

UNIT = """\
# Written by gpu-provision: MIG instances, Hopper's MIG mode and SR-IOV virtual functions do not survive a reboot,
# so the node's layout is applied again at boot, before anything that hands GPUs to containers starts.
[Unit]
Description=Apply the gpu-provision MIG layout and vGPU types
After=systemd-modules-load.service nvidia-persistenced.service nvidia-fabricmanager.service
Before=containerd.service docker.service kubelet.service nvidia-dcgm.service dcgm-exporter.service
ConditionPathExists=|{layout}
ConditionPathExists=|{vgpu}

[Service]
Type=oneshot
RemainAfterExit=yes
TimeoutStartSec=600
ExecStart=/usr/bin/python3 {bundle} {entry} boot --layout {layout} --vgpu {vgpu}{flags}

[Install]
WantedBy=multi-user.target
"""


def layout_document(node: Node) -> dict:
    """The node's layouts as a mig-parted ``version: v1`` document with one config named after the node."""
    model = catalog.model(node.gpus.model) if node.gpus.model else None
    return document({node.name: node_config(node, model)})


def layout_text(node: Node) -> str:
    """:func:`layout_document` as JSON: valid YAML for mig-parted, and readable by the node's standard library."""
    return json.dumps(layout_document(node), indent=2, sort_keys=True) + "\n"


def vgpu_text(node: Node) -> str:
    """The node's vGPU types as the applier reads them."""
    return json.dumps({"gpus": {str(k): v for k, v in sorted(node.vgpu.items())}}, indent=2, sort_keys=True) + "\n"


def cdi_flag(node: Node) -> str:
    """The CDI spec the applier regenerates after a layout change: the one the node's toolkit release keeps, or
    none (an empty value) where the node keeps no spec, so a MIG change never writes a spec nothing reads."""
    return "--cdi-output=" + (toolkit_facts.cdi_spec(node) if toolkit_facts.cdi_in_use(node) else "")


def flags(node: Node) -> list[str]:
    """Applier options that come from the node's settings."""
    out = []
    if node.mig.allow_drain:
        out.append("--allow-drain")
    if node.mig.allow_module_unload:
        out.append("--allow-module-unload")
    if node.driver.reboot == "allowed":
        out.append("--reboot-allowed")
    return out


def unit_text(node: Node) -> str:
    """The boot unit; it never reboots (``boot`` implies that) but drains and unloads the display modules for a
    GPU reset when the node allows it."""
    boot_flags = " " + cdi_flag(node) + "".join(
        flag for flag, allowed in ((" --allow-drain", node.mig.allow_drain),
                                   (" --allow-module-unload", node.mig.allow_module_unload)) if allowed)
    return UNIT.format(layout=LAYOUT_FILE, vgpu=VGPU_FILE, bundle=bundle.BUNDLE_PATH, entry=ENTRY, flags=boot_flags)


def plugin_for(cluster: Cluster) -> str | None:
    """The Kubernetes plugin that lists the cluster's GPUs and is restarted after a MIG change (a key of
    :data:`gpu_provision.node.mig.layout.PLUGINS`), or None where the cluster runs no Kubernetes."""
    if not cluster.kubernetes.enabled:
        return None
    return "dra" if cluster.kubernetes.dra else "device-plugin"


def apply_command(node: Node, what: str = "apply", plugin: str | None = DEFAULT_PLUGIN) -> str:
    """The shell command that runs the installed applier for ``node`` (``apply``, ``plan`` or ``vgpu``);
    ``plugin`` (:func:`plugin_for`) is the one an ``apply`` restarts, named when it is not the applier's default."""
    args = [what, cdi_flag(node)] if what == "apply" else [what]
    if what in ("apply", "plan"):
        args += ["--layout", LAYOUT_FILE, "--config", node.name]
    if what in ("vgpu", "plan") and node.vgpu:
        args += ["--vgpu", VGPU_FILE]
    if what == "apply":
        args += flags(node)
        if plugin != DEFAULT_PLUGIN:
            args.append(f"--plugin={plugin or 'none'}")
    return bundle.command(ENTRY, *args)
