"""The node-side MIG/vGPU applier as the deploy installs it: its files, the layout files it reads, the boot unit.

On a node (Python 3.9+, standard library only)::

    /usr/local/lib/gpu-provision/mig/mig_apply.py   the applier (gpu_provision/node/mig/apply.py)
    /usr/local/lib/gpu-provision/mig/mig_probe.py   the probe's mig section (gpu_provision/node/probe/mig.py)
    /usr/local/lib/gpu-provision/mig/mig_layout.py  the MIG decision (gpu_provision/node/mig/layout.py)
    /usr/local/lib/gpu-provision/mig/mig_vgpu.py    the vGPU decision (gpu_provision/node/mig/vgpu.py)
    /etc/gpu-provision/mig-layout.yaml             the node's layout, mig-parted ``version: v1`` written as JSON
    /etc/gpu-provision/vgpu.json                   the node's vGPU types (vGPU hosts only)
    /etc/systemd/system/gpu-provision-mig.service  re-applies both at boot, before the container runtime and kubelet
"""

from __future__ import annotations

import json
import shlex
from importlib import resources

from gpu_provision.spec import catalog
from gpu_provision.spec.migparted import node_config
from gpu_provision.spec.model import Node

APPLIER_DIR = "/usr/local/lib/gpu-provision/mig"
APPLIER = f"{APPLIER_DIR}/mig_apply.py"
LAYOUT_FILE = "/etc/gpu-provision/mig-layout.yaml"
VGPU_FILE = "/etc/gpu-provision/vgpu.json"
UNIT_NAME = "gpu-provision-mig.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}"

#: Shipped name -> (package, file) of its source.
SOURCES = {
    "mig_apply.py": ("gpu_provision.node.mig", "apply.py"),
    "mig_probe.py": ("gpu_provision.node.probe", "mig.py"),
    "mig_layout.py": ("gpu_provision.node.mig", "layout.py"),
    "mig_vgpu.py": ("gpu_provision.node.mig", "vgpu.py"),
}

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
ExecStart=/usr/bin/python3 {applier} boot --layout {layout} --vgpu {vgpu}{flags}

[Install]
WantedBy=multi-user.target
"""


def applier_files() -> dict[str, str]:
    """Node path -> content of every file the applier needs."""
    return {f"{APPLIER_DIR}/{name}": resources.files(package).joinpath(source).read_text()
            for name, (package, source) in SOURCES.items()}


def layout_document(node: Node) -> dict:
    """The node's layouts as a mig-parted ``version: v1`` document with one config named after the node."""
    model = catalog.model(node.gpus.model) if node.gpus.model else None
    return {"version": "v1", "mig-configs": {node.name: node_config(node, model)}}


def layout_text(node: Node) -> str:
    """:func:`layout_document` as JSON: valid YAML for mig-parted, and readable by the node's standard library."""
    return json.dumps(layout_document(node), indent=2, sort_keys=True) + "\n"


def vgpu_text(node: Node) -> str:
    """The node's vGPU types as the applier reads them."""
    return json.dumps({"gpus": {str(k): v for k, v in sorted(node.vgpu.items())}}, indent=2, sort_keys=True) + "\n"


def flags(node: Node) -> list[str]:
    """Applier options that come from the node's settings."""
    out = []
    if node.mig.allow_drain:
        out.append("--allow-drain")
    if node.driver.reboot == "allowed":
        out.append("--reboot-allowed")
    return out


def unit_text(node: Node) -> str:
    """The boot unit; it never reboots (``boot`` implies that) but drains when the node allows it."""
    boot_flags = " --allow-drain" if node.mig.allow_drain else ""
    return UNIT.format(layout=LAYOUT_FILE, vgpu=VGPU_FILE, applier=APPLIER, flags=boot_flags)


def apply_command(node: Node, what: str = "apply") -> str:
    """The shell command that runs the installed applier for ``node`` (``apply``, ``plan`` or ``vgpu``)."""
    argv = ["python3", APPLIER, what]
    if what in ("apply", "plan"):
        argv += ["--layout", LAYOUT_FILE, "--config", node.name]
    if what in ("vgpu", "plan") and node.vgpu:
        argv += ["--vgpu", VGPU_FILE]
    if what == "apply":
        argv += flags(node)
    return " ".join(shlex.quote(a) for a in argv)
