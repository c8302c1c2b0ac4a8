"""Fabric Manager, NSCQ and NVLSM, decided from the node's own PCI bus.

A model name does not say whether a node's GPUs sit on an NVSwitch baseboard: an H100 comes as HGX (NVSwitches)
and as PCIe or NVL cards (none), and Fabric Manager cannot start without NVSwitches, so the driver stage's services
would fail. The board says it, in one of two ways (``packages.json``, each with its source):

* up to the third NVSwitch generation (HGX A100, H100, H200), NVSwitches are PCI functions of the host: NVIDIA
  functions of the class ``nvswitch_pci`` names, which the probe reports with every NVIDIA function;
* fourth generation NVSwitches (NVLink 5: HGX B200, B300) are not PCI devices of the host. Fabric Manager and the
  NVLink Subnet Manager (NVLSM) reach them through a ConnectX-7 bridge whose functions carry a marker in their VPD
  (``nvlink5_bridge``); the probe reports those functions. Such a board needs NVLSM beside Fabric Manager.

``driver.fabric_manager`` decides: ``auto`` follows the bus, ``true``/``false`` force it, and preflight names a
forced value the bus contradicts before anything is installed. NVLSM comes with Fabric Manager where the bus has
NVLink 5 bridges; preflight also names a model whose data file says its baseboards have them (``fabric.nvlsm``)
on a node that shows none. On such a board the driver stage also loads ib_umad (now and at boot) before Fabric
Manager starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_provision.operations.packages import names
from gpu_provision.spec import catalog as gpus
from gpu_provision.spec.model import Node
from gpu_provision.spec.vendordata import package_data
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


def nvlink5_bridges(state: NodeStateData) -> list[str]:
    """The PCI addresses of the NVLink 5 management bridges (``nvlink5_bridge``) the gpu section found."""
    return [str(dev.get("address")) for dev in state.section("gpu").get("nvlink5_bridges") or []]


def wanted(node: Node, state: NodeStateData) -> bool:
    """Fabric Manager wanted: as ``driver.fabric_manager`` forces it, else (``auto``) when the bus has NVSwitches
    or NVLink 5 bridges to them."""
    forced = node.driver.fabric_manager
    if isinstance(forced, bool):
        return forced
    return bool(nvswitches(state) or nvlink5_bridges(state))


def decide(node: Node, state: NodeStateData) -> Fabric:
    """Fabric Manager (with NSCQ) and NVLSM for ``node``; NVLSM only with Fabric Manager on an NVLink 5 board."""
    fm = wanted(node, state)
    return Fabric(fabric_manager=fm, nvlsm=fm and bool(nvlink5_bridges(state)))


def mismatch(node: Node, state: NodeStateData) -> str | None:
    """Why a forced ``driver.fabric_manager`` contradicts the node's bus (None when it does not, or under auto)."""
    forced = node.driver.fabric_manager
    if not isinstance(forced, bool):
        return None
    found = nvswitches(state) + nvlink5_bridges(state)
    switch, bridge = package_data()["nvswitch_pci"], package_data()["nvlink5_bridge"]
    if forced and not found:
        return (f"{SETTING} is true but the node has no NVSwitch (no PCI function of vendor {switch['vendor']} and "
                f"class {switch['class']}, and no NVLink 5 bridge: no function of vendor {bridge['vendor']} with "
                f"{bridge['vpd_marker']} in its VPD): Fabric Manager cannot start without one; set it to auto or false")
    if not forced and found:
        return (f"{SETTING} is false but the node has {len(found)} NVSwitch(es) or NVLink 5 bridge(s) "
                f"({', '.join(found)}): their GPUs stay unusable for CUDA without Fabric Manager; set it to auto or "
                "true")
    return None


def model_mismatch(node: Node, state: NodeStateData) -> str | None:
    """Why the node's bus contradicts its model's data file (``fabric.nvlsm``: NVLink 5 HGX baseboards), when Fabric
    Manager is wanted there: the file may name the wrong model, or the board's bridges are hidden from the host."""
    model = gpus.model(node.gpus.model) if node.gpus.model else None
    if model is None or not model.nvlsm or not wanted(node, state) or nvlink5_bridges(state):
        return None
    bridge = package_data()["nvlink5_bridge"]
    return (f"the file says {node.gpus.model}, whose HGX baseboards reach their NVSwitches through NVLink 5 bridges, "
            f"but the node shows none (no PCI function of vendor {bridge['vendor']} with {bridge['vpd_marker']} in "
            "its VPD): NVLSM is left out, and Fabric Manager cannot route such a board without it")


def nvlsm_missing(node: Node, fam: str | None, state: NodeStateData) -> str | None:
    """Why the node cannot get NVLSM from where its driver comes from: its family's archive has no nvlsm package
    (``nvlsm_not_in_archive``: Ubuntu's) and the node does not have it installed already (None when it can)."""
    if fam is None or not decide(node, state).nvlsm:
        return None
    name = package_data()["driver"][fam].get("nvlsm_not_in_archive")
    if not name or state.package(name).version:
        return None
    return (f"this NVLink 5 board needs NVLSM ({name}) beside Fabric Manager, and the driver here comes from the "
            f"distribution's archive, which has no {name} package: install {name} from NVIDIA's CUDA repository "
            "first (NVIDIA's driver container takes it from there), then deploy again")


def kernel_modules(fabric: Fabric) -> list[str]:
    """The kernel modules NVLSM reaches an NVLink 5 board's switches through (``nvlink5_bridge.modules``: ib_umad),
    where NVLSM is wanted; loaded before Fabric Manager starts, as NVIDIA's driver container waits for them."""
    return list(package_data()["nvlink5_bridge"]["modules"]) if fabric.nvlsm else []


def modules_file() -> str:
    """The ``modules-load.d`` file that loads :func:`kernel_modules` at boot."""
    return str(package_data()["nvlink5_bridge"]["modules_file"])


def missing_modules(node: Node, state: NodeStateData) -> list[str]:
    """The wanted :func:`kernel_modules` neither loaded (``/proc/modules``) nor built in (``/sys/module/NAME``)."""
    return [m for m in kernel_modules(decide(node, state))
            if m not in state.system.get("modules", []) and not state.file(f"/sys/module/{m}").exists]


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
    out = {n for entry in package_data()["driver"].values()
           for key in ("fabric_manager", "nscq", "nvlsm") for n in names(entry.get(key, []), branch=branch)}
    return out | {e["nvlsm_not_in_archive"] for e in package_data()["driver"].values() if e.get("nvlsm_not_in_archive")}
