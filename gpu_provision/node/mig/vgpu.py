"""The vGPU decision, as pure functions on plain data: wanted vGPU type per GPU vs. the node's SR-IOV sysfs state.

For SR-IOV GPUs with the vendor-specific VFIO framework (NVIDIA vGPU 17+, Ada/Hopper and newer): virtual functions
are enabled with ``/usr/lib/nvidia/sriov-manage -e <PF>``; a vGPU is created on a VF by writing a type ID to
``/sys/bus/pci/devices/<VF>/nvidia/current_vgpu_type`` and removed by writing ``0``. The IDs come from the VF's
``creatable_vgpu_types`` (``<id> : <name>`` lines), which the driver empties once the VF holds a vGPU and shrinks as
the GPU fills, so type IDs are looked up by name there (they are unique only within one card).

A GPU is converged when at least one VF holds the wanted type, no VF holds another type, and no free VF still
offers the wanted type (the GPU carries as many vGPUs of the type as it can). Shared with the node-side applier
(:mod:`.apply`): Python 3.9+, standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from .nvsmi import sysfs_address

SRIOV_MANAGE = "/usr/lib/nvidia/sriov-manage"


@dataclass(frozen=True)
class VgpuAction:
    """One step of a vGPU change."""

    kind: str  # refuse | enable-vfs | clear | assign
    gpu: int
    address: str = ""
    type_id: int = 0
    type_name: str = ""
    reason: str = ""

    def __str__(self) -> str:
        if self.kind == "refuse":
            return f"GPU {self.gpu}: refused: {self.reason}"
        if self.kind == "enable-vfs":
            return f"GPU {self.gpu}: enable the virtual functions of {self.address} ({SRIOV_MANAGE} -e)"
        if self.kind == "clear":
            return f"GPU {self.gpu}: remove vGPU type {self.type_id} from VF {self.address}"
        return f"GPU {self.gpu}: create {self.type_name} (type {self.type_id}) on VF {self.address}"


def offered_types(pf: dict) -> dict:
    """Every ``{name: id}`` a physical function's VFs list as creatable."""
    out: dict = {}
    for vf in pf.get("vfs", []):
        out.update(vf.get("creatable") or {})
    return out


def vgpu_steps(index: int, type_name: str, address: str, pf: dict | None, known: dict) -> list:
    """What GPU ``index`` (PCI function ``address``) needs to carry vGPUs of ``type_name``.

    ``pf`` is the probe's sysfs view of the function, ``known`` the ``{name: id}`` mapping recorded by earlier
    applies (needed once every VF holds a vGPU and no list names the types any more).
    """
    if pf is None:
        return [VgpuAction("refuse", index, address, reason=f"PCI function {address} is not in sysfs")]
    if not pf.get("sriov_totalvfs"):
        return [VgpuAction("refuse", index, address, reason=f"{address} offers no SR-IOV virtual functions "
                           "(needs an SR-IOV GPU and the NVIDIA vGPU manager driver)")]
    if not pf.get("sriov_numvfs") or not pf.get("vfs"):
        return [VgpuAction("enable-vfs", index, address)]
    offered = offered_types(pf)
    type_id = offered.get(type_name, known.get(type_name))
    if type_id is None:
        names = ", ".join(sorted(offered)) or "none (every VF holds a vGPU)"
        return [VgpuAction("refuse", index, address, reason=f"'{type_name}' is not a vGPU type this GPU offers "
                           f"(offered: {names})")]
    steps = []
    free = []
    for vf in pf["vfs"]:
        current = vf.get("current") or 0
        if current == type_id:
            continue
        if current:
            steps.append(VgpuAction("clear", index, vf["address"], type_id=current))
        elif type_name in (vf.get("creatable") or {}):
            free.append(vf)
    if free and not steps:
        steps.append(VgpuAction("assign", index, free[0]["address"], type_id=type_id, type_name=type_name))
    return steps


def plan_vgpu(wanted: dict, snapshot: dict) -> list:
    """The next steps for every GPU in ``wanted`` (``{index: type name}``) given the probe's ``mig`` section read
    with ``{"vgpu": true}``. The applier repeats probe-and-plan until this is empty (VF lists change as it goes)."""
    gpus = {g["index"]: g for g in snapshot.get("gpus", [])}
    known = snapshot.get("vgpu_known_types") or {}
    steps = []
    for index in sorted(wanted):
        gpu = gpus.get(index)
        if gpu is None:
            steps.append(VgpuAction("refuse", index, reason=f"GPU {index} is not on this node"))
            continue
        address = sysfs_address(gpu["bus_id"])
        steps.extend(vgpu_steps(index, wanted[index], address, (snapshot.get("vgpu") or {}).get(address), known))
    return steps


def held(pf: dict | None, known: dict) -> list:
    """Names (or ``type <id>``) of the vGPUs a physical function's VFs hold, in VF order."""
    by_id = {v: k for k, v in known.items()}
    return [by_id.get(vf["current"], f"type {vf['current']}")
            for vf in (pf or {}).get("vfs", []) if vf.get("current")]
