"""Fabric Manager, NSCQ and NVLSM, decided from the node's own PCI bus.

A model name does not say whether a node's GPUs sit on an NVSwitch baseboard: an H100 comes as HGX (NVSwitches)
and as PCIe or NVL cards (none), and Fabric Manager cannot start without NVSwitches, so the driver stage's services
would fail. The probe reports every NVIDIA PCI function with its class; an NVSwitch is the class
``packages.json`` names (``nvswitch_pci``, from NVIDIA's NVSwitch driver). ``driver.fabric_manager`` decides:
``auto`` follows the bus, ``true``/``false`` force it, and preflight names a forced value the bus contradicts
before anything is installed. NVLSM comes with Fabric Manager where the model's data file says its NVSwitch
baseboards need it (``fabric.nvlsm``: NVLink 5 HGX boards).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_provision.operations.packages import names, package_data
from gpu_provision.spec import catalog as gpus
from gpu_provision.spec.model import Node
from gpu_provision.state import NodeStateData

SETTING = "driver.fabric_manager"


@dataclass(frozen=True)
class Fabric:
    """What the driver stage installs for the NVSwitch fabric on one node."""

    #: nvidia-fabricmanager and NSCQ, and the Fabric Manager service enabled.
    fabric_manager: bool
    #: The NVLink Subnet Manager beside Fabric Manager.
    nvlsm: bool


def nvswitches(state: NodeStateData) -> list[str]:
    """The PCI addresses of the NVSwitches on the node's bus, from the gpu section's NVIDIA functions."""
    fact = package_data()["nvswitch_pci"]
    return [str(dev.get("address")) for dev in state.section("gpu").get("pci", [])
            if str(dev.get("class", "")).lower() == fact["class"]]


def wanted(node: Node, state: NodeStateData) -> bool:
    """Fabric Manager wanted: as ``driver.fabric_manager`` forces it, else (``auto``) when the bus has NVSwitches."""
    forced = node.driver.fabric_manager
    if isinstance(forced, bool):
        return forced
    return bool(nvswitches(state))


def decide(node: Node, state: NodeStateData) -> Fabric:
    """Fabric Manager (with NSCQ) and NVLSM for ``node``; NVLSM only with Fabric Manager and a model that needs it."""
    fm = wanted(node, state)
    model = gpus.model(node.gpus.model) if node.gpus.model else None
    return Fabric(fabric_manager=fm, nvlsm=fm and bool(model and model.nvlsm))


def mismatch(node: Node, state: NodeStateData) -> str | None:
    """Why a forced ``driver.fabric_manager`` contradicts the node's bus (None when it does not, or under auto)."""
    forced = node.driver.fabric_manager
    if not isinstance(forced, bool):
        return None
    found = nvswitches(state)
    fact = package_data()["nvswitch_pci"]
    if forced and not found:
        return (f"{SETTING} is true but the node has no NVSwitch (no PCI function of vendor {fact['vendor']} and "
                f"class {fact['class']}): Fabric Manager cannot start without one; set it to auto or false")
    if not forced and found:
        return (f"{SETTING} is false but the node has {len(found)} NVSwitch(es) ({', '.join(found)}): their GPUs "
                "stay unusable for CUDA without Fabric Manager; set it to auto or true")
    return None


def package_names(node: Node, fam: str, fabric: Fabric) -> tuple[list[str], list[str]]:
    """The fabric's package names on OS family ``fam``: those at the driver's version (Fabric Manager, NSCQ) and
    those versioned on their own (NVLSM)."""
    entry = package_data()["driver"][fam]
    branch = node.driver.spell("branch")
    pinned = [*names(entry["fabric_manager"], branch=branch), *names(entry["nscq"], branch=branch)]
    own = names(entry["nvlsm"], branch=branch) if fabric.nvlsm else []
    return (pinned if fabric.fabric_manager else []), own


def all_package_names(node: Node) -> set[str]:
    """Every fabric package name any OS family could use: what the driver stage asks the probe about."""
    branch = node.driver.spell("branch")
    return {n for entry in package_data()["driver"].values()
            for key in ("fabric_manager", "nscq", "nvlsm") for n in names(entry.get(key, []), branch=branch)}
