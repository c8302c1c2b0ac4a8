"""The MIG layout decision, as pure functions: desired :class:`GpuLayout` per GPU vs. a node's probed state.

This module is the single source of what must happen to a node's GPUs. The controller calls it (through
:mod:`gpu_provision.mig.plan`) for the deploy's plan, drift and ``mig-assert``; the node-side applier
(:mod:`gpu_provision.node.mig.apply`) calls it to act, and again afterwards to read the result back.

Inputs:

* desired, per GPU index: a :class:`GpuLayout` (MIG mode and placements, planned by
  :mod:`gpu_provision.node.mig.placement`);
* the ``mig`` probe section (:mod:`gpu_provision.node.probe.mig`): GPUs with ``mig_current``/``mig_pending``,
  their GPU instances (``gis``, each with ``cis``), and GPU processes.

Placement is given to the driver explicitly (``nvidia-smi mig -cgi <profile>:<start>``). NVIDIA's own pages do not
show that syntax; third-party copies of ``nvidia-smi mig --help`` describe a "profile tuple" of a profile name or ID
and an optional placement specifier, "a colon and a placement start index", and it is what NVML's
``nvmlDeviceCreateGpuInstanceWithPlacement`` offers. Instances are also created largest first, in the planned order,
and the applier reads ``-lgi`` back afterwards: a driver that placed an instance elsewhere is reported, not hidden.
Node-side code: Python 3.9+, standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from .holders import INSTANCE_HOLDERS, MODE_HOLDERS
from .model import GpuLayout, Placement, fmt_placements

CDI_OUTPUT = "/etc/cdi/nvidia.yaml"

#: Action kinds in the order they run on a node.
KINDS = ("refuse", "drain", "stop-services", "destroy-ci", "destroy-gi", "mig-mode", "reset", "create-gi",
         "create-ci", "cdi-refresh", "start-services", "restart-plugin")
#: The kinds that change (or finish changing) a GPU's MIG mode: one step per GPU, and the reason the holders of
#: the whole GPU (:data:`gpu_provision.node.mig.holders.MODE_HOLDERS`) are stopped rather than only the instance ones.
MODE_KINDS = ("mig-mode", "reset")
#: The Kubernetes plugin that lists a node's GPUs, by ``kubernetes.gpu_allocation``: restarted after a MIG change,
#: since each lists the node's devices only as it starts.
PLUGINS = {"device-plugin": "the device plugin",
           "dra": "the DRA kubelet plugin (its ResourceSlices then list the new MIG devices)"}
#: The plugin restarted when none is named: ``kubernetes.gpu_allocation``'s own default.
DEFAULT_PLUGIN = "device-plugin"


@dataclass(frozen=True)
class Action:
    """One step of a MIG change on a node."""

    kind: str
    gpu: int | None = None
    gi: int | None = None
    ci: int | None = None
    profile: str | None = None
    start: int | None = None
    size: int | None = None
    enable: bool | None = None
    units: tuple[str, ...] = ()
    pids: tuple[tuple[int, str], ...] = ()
    reason: str = ""
    #: The CDI spec a ``cdi-refresh`` writes.
    path: str = CDI_OUTPUT
    #: The plugin a ``restart-plugin`` restarts (a key of :data:`PLUGINS`).
    plugin: str = DEFAULT_PLUGIN

    def __str__(self) -> str:
        where = "" if self.gpu is None else f"GPU {self.gpu}: "
        if self.kind == "refuse":
            return where + "refused: " + self.reason
        if self.kind == "drain":
            return where + "stop processes " + ", ".join(f"{pid} ({name})" for pid, name in self.pids)
        if self.kind in ("stop-services", "start-services"):
            return self.kind.split("-")[0] + " " + " ".join(self.units)
        if self.kind == "destroy-ci":
            return where + f"destroy compute instance {self.ci} of GPU instance {self.gi} ({self.profile})"
        if self.kind == "destroy-gi":
            return where + f"destroy GPU instance {self.gi} ({self.profile}@{self.start}:{self.size})"
        if self.kind == "mig-mode":
            return where + ("enable" if self.enable else "disable") + " MIG mode" + (
                f" ({self.reason})" if self.reason else "")
        if self.kind == "reset":
            return where + "reset the GPU (" + self.reason + ")"
        if self.kind == "create-gi":
            return where + f"create {self.profile}@{self.start}:{self.size} with its compute instance"
        if self.kind == "create-ci":
            return where + f"create the compute instance of GPU instance {self.gi} ({self.profile})"
        if self.kind == "cdi-refresh":
            return "regenerate the CDI spec " + self.path
        if self.kind == "restart-plugin":
            return "restart " + PLUGINS[self.plugin]
        return self.kind


def _full_ci(gi: dict) -> dict | None:
    """The compute instance spanning the whole GPU instance (same profile name), if it exists."""
    for ci in gi.get("cis", []):
        if ci["profile"] == gi["profile"]:
            return ci
    return None


def _teardown(gi: dict, index: int) -> list[Action]:
    steps = [Action("destroy-ci", gpu=index, gi=gi["id"], ci=ci["id"], profile=ci["profile"])
             for ci in sorted(gi.get("cis", []), key=lambda c: c["id"])]
    steps.append(Action("destroy-gi", gpu=index, gi=gi["id"], profile=gi["profile"], start=gi["start"],
                        size=gi["size"]))
    return steps


def gpu_steps(index: int, want: GpuLayout, gpu: dict | None) -> list[Action]:
    """What GPU ``index`` needs to get from its probed state ``gpu`` to ``want``, before the node-wide steps are
    added (empty when it has its layout)."""
    if gpu is None:
        return [Action("refuse", gpu=index, reason=f"GPU {index} is not on this node")]
    current, pending = gpu.get("mig_current"), gpu.get("mig_pending")
    if current is None:
        return [Action("refuse", gpu=index, reason=f"{gpu.get('name', 'this GPU')} does not support MIG")]
    steps: list[Action] = []
    gis = sorted(gpu.get("gis", []) if current else [], key=lambda g: (g["start"], g["id"]))
    if not want.enabled:
        for gi in gis:
            steps.extend(_teardown(gi, index))
        if current:
            steps.append(Action("mig-mode", gpu=index, enable=False,
                                reason="a GPU reset follows if the change stays pending"))
        elif pending:
            steps.append(Action("mig-mode", gpu=index, enable=False, reason="cancels a pending enable"))
        return steps
    remaining = list(want.placements)
    keep = []
    for gi in gis:
        key = Placement.from_dict(gi)
        if key in remaining:
            remaining.remove(key)
            keep.append(gi)
        else:
            steps.extend(_teardown(gi, index))
    if not current:
        if pending:
            steps.append(Action("reset", gpu=index, reason="MIG enable is pending"))
        else:
            steps.append(Action("mig-mode", gpu=index, enable=True,
                                reason="a GPU reset follows if the change stays pending"))
    elif pending is False:
        steps.append(Action("mig-mode", gpu=index, enable=True, reason="cancels a pending disable"))
    for gi in keep:
        full = _full_ci(gi)
        for ci in sorted(gi.get("cis", []), key=lambda c: c["id"]):
            if ci is not full:
                steps.append(Action("destroy-ci", gpu=index, gi=gi["id"], ci=ci["id"], profile=ci["profile"]))
        if full is None:
            steps.append(Action("create-ci", gpu=index, gi=gi["id"], profile=gi["profile"]))
    for p in sorted(remaining, key=lambda p: (-p.size, p.start)):
        steps.append(Action("create-gi", gpu=index, profile=p.profile, start=p.start, size=p.size))
    return steps


def _order(steps: list[Action]) -> list[Action]:
    rank = {k: i for i, k in enumerate(KINDS)}
    # Mode changes and the resets that finish pending ones are one step per GPU, in GPU order.
    for kind in MODE_KINDS:
        rank[kind] = rank[MODE_KINDS[0]]
    return sorted(steps, key=lambda a: (rank[a.kind], -1 if a.gpu is None else a.gpu))


def plan_node(desired: dict[int, GpuLayout], snapshot: dict, active_units=(), allow_drain: bool = False,
              plugin: str | None = DEFAULT_PLUGIN, cdi_output: str | None = CDI_OUTPUT) -> list[Action]:
    """The ordered actions that bring the node in ``snapshot`` to ``desired`` (empty when it is there).

    GPUs needing a change while user processes hold them get a ``refuse`` action naming the processes (pid and
    name), unless ``allow_drain``: then a ``drain`` action stops them first. Holder services among ``active_units``
    (:func:`gpu_provision.node.mig.holders.holding`) are stopped before the first change and started after the
    last; the CDI spec is regenerated and ``plugin`` (a key of :data:`PLUGINS`, None for none) restarted after any
    change. ``cdi_output``: the CDI spec to regenerate (its path follows the toolkit release), None on a node
    without one.
    """
    gpus = {g["index"]: g for g in snapshot.get("gpus", [])}
    if snapshot.get("smi_rc") not in (0, None) or (snapshot.get("error") and not gpus):
        return [Action("refuse", reason="nvidia-smi failed: " + str(snapshot.get("error") or "")[:200])]
    steps: list[Action] = []
    mode_change = False
    for index in sorted(desired):
        needed = gpu_steps(index, desired[index], gpus.get(index))
        if not needed:
            continue
        if any(a.kind == "refuse" for a in needed):
            steps.extend(a for a in needed if a.kind == "refuse")
            continue
        uuid = gpus[index]["uuid"]
        holders = tuple((p["pid"], p["name"]) for p in snapshot.get("processes", [])
                        if p.get("gpu") == index or p.get("gpu_uuid") == uuid)
        if holders and not allow_drain:
            names = ", ".join(f"{pid} ({name})" for pid, name in holders)
            steps.append(Action("refuse", gpu=index, pids=holders,
                                reason=f"GPU {index} is in use by {names}; stop them or set mig.allow_drain"))
            continue
        if holders:
            steps.append(Action("drain", gpu=index, pids=holders))
        steps.extend(needed)
        mode_change = mode_change or any(a.kind in MODE_KINDS for a in needed)
    if not steps or any(a.kind == "refuse" for a in steps):
        return _order([a for a in steps if a.kind == "refuse"])
    active = set(active_units)
    units = [u for u in (MODE_HOLDERS if mode_change else INSTANCE_HOLDERS) if u in active]
    if units:
        steps.append(Action("stop-services", units=tuple(units)))
        steps.append(Action("start-services", units=tuple(reversed(units))))
    if cdi_output:
        steps.append(Action("cdi-refresh", path=cdi_output))
    if plugin:
        steps.append(Action("restart-plugin", plugin=plugin))
    return _order(steps)


def commands(action: Action) -> list[list[str]]:
    """The argv lists that carry out ``action`` (``drain``, ``refuse`` and device plugin restarts are done by the
    applier itself and have none)."""
    g = str(action.gpu)
    if action.kind == "stop-services":
        return [["systemctl", "stop", *action.units]]
    if action.kind == "start-services":
        return [["systemctl", "start", *action.units]]
    if action.kind == "destroy-ci":
        return [["nvidia-smi", "mig", "-i", g, "-gi", str(action.gi), "-ci", str(action.ci), "-dci"]]
    if action.kind == "destroy-gi":
        return [["nvidia-smi", "mig", "-i", g, "-gi", str(action.gi), "-dgi"]]
    if action.kind == "mig-mode":
        return [["nvidia-smi", "-i", g, "-mig", "1" if action.enable else "0"]]
    if action.kind == "reset":
        return [["nvidia-smi", "-r", "-i", g]]
    if action.kind == "create-gi":
        return [["nvidia-smi", "mig", "-i", g, "-cgi", f"{action.profile}:{action.start}", "-C"]]
    if action.kind == "create-ci":
        return [["nvidia-smi", "mig", "-i", g, "-gi", str(action.gi), "-cci"]]
    if action.kind == "cdi-refresh":
        return [["nvidia-ctk", "cdi", "generate", "--output=" + action.path]]
    return []


def found_layout(gpu: dict | None) -> GpuLayout | None:
    """The layout a probed GPU has now (None when it is absent or does not support MIG)."""
    if gpu is None or gpu.get("mig_current") is None:
        return None
    if not gpu["mig_current"]:
        return GpuLayout(False)
    return GpuLayout.placed(Placement.from_dict(gi) for gi in gpu.get("gis", []))


def describe_gpu(gpu: dict | None) -> str:
    """A probed GPU's MIG state in one phrase: ``MIG disabled``, ``MIG enable pending``, or its placements."""
    if gpu is None:
        return "no such GPU"
    current, pending = gpu.get("mig_current"), gpu.get("mig_pending")
    if current is None:
        return "MIG not supported"
    if not current:
        return "MIG enable pending" if pending else "MIG disabled"
    text = fmt_placements(Placement.from_dict(gi) for gi in gpu.get("gis", []))
    missing_ci = [gi for gi in gpu.get("gis", []) if _full_ci(gi) is None]
    if missing_ci:
        text += " (no compute instance on " + ", ".join(f"GPU instance {gi['id']}" for gi in missing_ci) + ")"
    if pending is False:
        text += " (MIG disable pending)"
    return text


@dataclass(frozen=True)
class Drift:
    """A GPU whose MIG state differs from its layout: what was expected, what was found.

    ``found`` is the layout the GPU has (None when it is absent or lacks MIG); ``found_text`` says it the way users
    read it, with what a layout cannot hold (a pending mode change, an instance without its compute instance).
    """

    gpu: int
    expected: GpuLayout
    found: GpuLayout | None
    found_text: str

    def __str__(self) -> str:
        return f"GPU {self.gpu}: expected {self.expected}; found {self.found_text}"


def drift(desired: dict[int, GpuLayout], snapshot: dict) -> list[Drift]:
    """The GPUs of ``desired`` whose probed state in ``snapshot`` (the ``mig`` section) needs a change, by index."""
    gpus = {g["index"]: g for g in snapshot.get("gpus", [])}
    out = []
    for index, want in sorted(desired.items()):
        gpu = gpus.get(index)
        if gpu_steps(index, want, gpu):
            out.append(Drift(index, want, found_layout(gpu), describe_gpu(gpu)))
    return out
