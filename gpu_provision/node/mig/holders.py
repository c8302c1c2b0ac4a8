"""Which systemd units hold a GPU: the one decision, for the node applier, ``mig-assert`` and the deploy's plan;
and the label of the one GPU-holding pod found by label, NVIDIA's DRA kubelet plugin.

A MIG change needs the GPU free of handles, so the units that may hold one are stopped before the change and started
again after it. Instance changes need the Kubernetes side and DCGM gone (as NVIDIA mig-parted's hooks do); a MIG
mode change or GPU reset also needs the persistence daemon and the fabric manager off the device.

A unit counts as holding the GPU when systemd reports it ``active``, ``activating`` (starting: it may open the
device any moment, and ``systemctl start`` afterwards is what it was doing anyway) or ``reloading`` (running, with
its handles open). ``deactivating``, ``inactive``, ``failed`` and units systemd does not know are left alone:
restarting them after the change would undo a stop someone else asked for. Node-side code: Python 3.9+, standard
library only.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Mapping, Optional, Sequence, Set

#: Units that hold GPU handles, in stopping order.
INSTANCE_HOLDERS = ("kubelet.service", "dcgm-exporter.service", "nvidia-dcgm.service", "nvsm.service",
                    "nvidia-persistenced.service")
MODE_HOLDERS = INSTANCE_HOLDERS + ("nvidia-fabricmanager.service",)
#: The pod label of NVIDIA's DRA kubelet plugin, as :mod:`gpu_provision.k8s.dra` renders its DaemonSet (it takes
#: the label from here). The plugin holds the GPUs through NVML and announces what it found at start in the node's
#: ResourceSlices, so the applier stops its containers before a MIG change and restarts them after one: it then
#: publishes the new MIG devices. A node without the DRA driver has no pod carrying it.
DRA_PLUGIN_LABEL = ("app.kubernetes.io/name", "dra-driver-nvidia-gpu-kubelet-plugin")
#: systemd ``ActiveState`` values of a unit that holds (or is about to hold) a GPU.
HOLDING_STATES = ("active", "activating", "reloading")


def holding(states: Mapping[str, Optional[str]]) -> Set[str]:
    """The GPU-holding units among ``states`` (unit name -> systemd active state, None when unknown)."""
    return {unit for unit in MODE_HOLDERS if states.get(unit) in HOLDING_STATES}


def states_command(units: Sequence[str]) -> str:
    """The shell command that prints each unit's active state, one per line in ``units``' order: what
    :func:`holding` reads, for a controller that asks a node over SSH (the rollout)."""
    return "systemctl is-active " + " ".join(units) + " 2>/dev/null || true"


def start_again_command(units: Sequence[str]) -> str:
    """The shell command that starts each of ``units`` again unless something (the change, a reboot) already did;
    it always succeeds, so a unit that will not start is found by the verification that follows."""
    return "for u in " + " ".join(units) + "; do systemctl is-active -q $u || systemctl start $u; done; true"


def running_holders() -> Set[str]:
    """The GPU-holding units running on this machine now (none where systemd cannot be asked)."""
    if not shutil.which("systemctl"):
        return set()
    units = sorted(MODE_HOLDERS)
    try:
        proc = subprocess.run(["systemctl", "is-active", *units], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              universal_newlines=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return set()
    # One state per line, in argument order.
    return holding(dict(zip(units, proc.stdout.split())))
