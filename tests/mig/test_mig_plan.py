"""The MIG decision on the real H200 profile tables: parsers of the driver's formats, the placement planner, and
the exact command sequence for each case (enable, change of layout, no-op, busy GPU, pending mode, disable)."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_provision.mig import install
from gpu_provision.mig.plan import layout_drift, mig_actions
from gpu_provision.node.mig import apply, layout, migparted, nvsmi, placement
from gpu_provision.node.mig.layout import Action
from gpu_provision.node.mig.model import GpuLayout, Placement, ProfileTable, fmt_placements
from gpu_provision.node.probe import mig as probe
from gpu_provision.spec import catalog, load_cluster
from gpu_provision.spec import mig as spec_mig
from gpu_provision.spec.model import Mig, MigLayout
from gpu_provision.spec.resolve import derive

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
UUID = "GPU-7a01bbbc-8780-9e2b-9ffe-56c5caa0e387"
BALANCED = (Placement("2g.35gb", 0, 2), Placement("1g.18gb", 2, 1), Placement("1g.18gb", 3, 1),
            Placement("3g.71gb", 4, 4))
TWO_3G = (Placement("3g.71gb", 0, 4), Placement("3g.71gb", 4, 4))


def snapshot(current: bool = True, pending: bool | None = None, instances: bool = True, processes=(),
             count: int = 1) -> dict:
    """A probe answer for ``count`` H200s, GPU 0 with the balanced layout when ``instances`` (parsed from text in
    the driver's format)."""
    line = "{i}, {uuid}, NVIDIA H200, 00000000:{bus:02X}:00.0, 0x233510DE, {cur}, {pend}"
    word = {True: "Enabled", False: "Disabled"}
    text = "\n".join(line.format(i=i, uuid=UUID if i == 0 else UUID[:-1] + str(i), bus=6 + i, cur=word[current],
                                 pend=word[current if pending is None else pending]) for i in range(count))
    gpus = probe.parse_query_gpu(text)
    lgi = (HERE / "fixtures" / "lgi-balanced.txt").read_text() if instances and current else ""
    lci = (HERE / "fixtures" / "lci-balanced.txt").read_text() if instances and current else ""
    probe.attach_instances(gpus, lgi, lci)
    return {"smi_rc": 0, "error": None, "gpus": gpus, "processes": list(processes)}


def want(placements, enabled: bool = True) -> dict[int, GpuLayout]:
    return {0: GpuLayout(enabled, tuple(placements))}


def argv(actions: list[Action]) -> list[str]:
    return [" ".join(a) for action in actions for a in layout.commands(action)]


# --- parsers --------------------------------------------------------------------------------------------------


def test_driver_tables_equal_the_catalog(h200_table: dict) -> None:
    """The real H200's -lgip/-lgipp, parsed, give exactly the catalog's table (so node and controller plan alike)."""
    assert ProfileTable.from_dict(h200_table) == catalog.model("H200").mig


def test_lgi_with_mig_disabled_is_empty() -> None:
    assert nvsmi.parse_lgi((REPO / "tests/fixtures/h200/nvidia-smi_mig_-lgi.txt").read_text()) == []


def test_lgi_and_lci_rows() -> None:
    gis = nvsmi.parse_lgi((HERE / "fixtures" / "lgi-balanced.txt").read_text())
    assert [(g["profile"], g["profile_id"], g["instance_id"], g["start"], g["size"]) for g in gis] == [
        ("3g.71gb", 9, 2, 4, 4), ("2g.35gb", 14, 3, 0, 2), ("1g.18gb", 19, 9, 2, 1), ("1g.18gb", 19, 10, 3, 1)]
    cis = nvsmi.parse_lci((HERE / "fixtures" / "lci-balanced.txt").read_text())
    assert [(c["gpu_instance_id"], c["profile"], c["profile_id"], c["instance_id"], c["size"]) for c in cis] == [
        (2, "3g.71gb", 2, 0, 3), (3, "2g.35gb", 1, 0, 2), (9, "1g.18gb", 0, 0, 1), (10, "1g.18gb", 0, 0, 1)]


def test_compute_apps_mapped_to_gpu_index() -> None:
    gpus = snapshot()["gpus"]
    apps = probe.parse_compute_apps(f"4242, python3, {UUID}, 1024\n", gpus)
    assert apps == [{"pid": 4242, "name": "python3", "gpu_uuid": UUID, "gpu": 0, "used_memory_mib": "1024"}]


def test_the_planner_gives_the_known_placements(h200_table: dict) -> None:
    """Every H200 layout up to min(limit, 4) of each profile, planned on the driver's table (as the node plans) and
    through the cluster file's checks (as the controller plans): the placements both planners agreed on before they
    became one (fixtures/h200-placements.txt), and a refusal for every layout not listed there."""
    known = {}
    for line in (HERE / "fixtures" / "h200-placements.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            counts_text, placements_text = line.split(" -> ")
            known[counts_text] = placements_text
    driver = ProfileTable.from_dict(h200_table)
    catalog_table = catalog.model("H200").mig
    seen = 0
    for combo in itertools.product(*(range(min(p.max_instances, 4) + 1) for p in catalog_table.profiles)):
        counts = {p.name: c for p, c in zip(catalog_table.profiles, combo) if c}
        key = spec_mig.format_layout(counts) or "-"
        node = placement.plan(driver, counts)
        if key not in known:
            assert node is None, counts
            assert not spec_mig.fits(catalog_table, counts), counts
            continue
        seen += 1
        assert node is not None and fmt_placements(node) == known[key], counts
        assert spec_mig.plan(catalog_table, counts) == node, counts
    assert seen == len(known) == 119


# --- command sequences ----------------------------------------------------------------------------------------


def test_enable_from_disabled() -> None:
    actions = layout.plan_node(want(BALANCED), snapshot(current=False))
    assert argv(actions) == [
        "nvidia-smi -i 0 -mig 1",
        "nvidia-smi mig -i 0 -cgi 3g.71gb:4 -C",
        "nvidia-smi mig -i 0 -cgi 2g.35gb:0 -C",
        "nvidia-smi mig -i 0 -cgi 1g.18gb:2 -C",
        "nvidia-smi mig -i 0 -cgi 1g.18gb:3 -C",
        "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml",
    ]
    assert [a.kind for a in actions][-1] == "restart-plugin"


def test_no_op_when_layout_matches() -> None:
    assert layout.plan_node(want(BALANCED), snapshot(), active_units={"kubelet.service"}) == []


def test_change_of_layout_applies_only_the_difference() -> None:
    actions = layout.plan_node(want(TWO_3G), snapshot(), active_units={"kubelet.service", "nvidia-dcgm.service",
                                                                        "nvidia-fabricmanager.service"})
    assert argv(actions) == [
        "systemctl stop kubelet.service nvidia-dcgm.service",
        "nvidia-smi mig -i 0 -gi 3 -ci 0 -dci",
        "nvidia-smi mig -i 0 -gi 9 -ci 0 -dci",
        "nvidia-smi mig -i 0 -gi 10 -ci 0 -dci",
        "nvidia-smi mig -i 0 -gi 3 -dgi",
        "nvidia-smi mig -i 0 -gi 9 -dgi",
        "nvidia-smi mig -i 0 -gi 10 -dgi",
        "nvidia-smi mig -i 0 -cgi 3g.71gb:0 -C",
        "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml",
        "systemctl start nvidia-dcgm.service kubelet.service",
    ]


def test_mode_change_also_stops_persistenced_and_fabric_manager() -> None:
    units = {"kubelet.service", "nvidia-persistenced.service", "nvidia-fabricmanager.service", "sshd.service"}
    actions = layout.plan_node(want(BALANCED), snapshot(current=False), active_units=units)
    assert argv(actions)[0] == "systemctl stop kubelet.service nvidia-persistenced.service nvidia-fabricmanager.service"
    assert argv(actions)[-1] == "systemctl start nvidia-fabricmanager.service nvidia-persistenced.service kubelet.service"


def test_busy_gpu_is_refused_naming_processes() -> None:
    procs = [{"pid": 4242, "name": "python3", "gpu_uuid": UUID, "gpu": 0, "used_memory_mib": "1024"}]
    actions = layout.plan_node(want(TWO_3G), snapshot(processes=procs))
    assert [a.kind for a in actions] == ["refuse"]
    assert str(actions[0]) == ("GPU 0: refused: GPU 0 is in use by 4242 (python3); stop them or set "
                               "mig.allow_drain")
    assert argv(actions) == []
    drained = layout.plan_node(want(TWO_3G), snapshot(processes=procs), allow_drain=True)
    assert drained[0] == Action("drain", gpu=0, pids=((4242, "python3"),))
    assert argv(drained)[-2] == "nvidia-smi mig -i 0 -cgi 3g.71gb:0 -C"


def test_busy_gpu_without_a_change_is_left_alone() -> None:
    procs = [{"pid": 4242, "name": "python3", "gpu_uuid": UUID, "gpu": 0, "used_memory_mib": "1024"}]
    assert layout.plan_node(want(BALANCED), snapshot(processes=procs)) == []


def test_pending_enable_is_finished_by_a_reset() -> None:
    actions = layout.plan_node(want(BALANCED), snapshot(current=False, pending=True))
    assert argv(actions)[:2] == ["nvidia-smi -r -i 0", "nvidia-smi mig -i 0 -cgi 3g.71gb:4 -C"]
    assert str(actions[0]) == "GPU 0: reset the GPU (MIG enable is pending)"


def test_pending_disable_is_cancelled() -> None:
    actions = layout.plan_node(want(BALANCED), snapshot(current=True, pending=False))
    assert argv(actions) == ["nvidia-smi -i 0 -mig 1", "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"]


def test_disable_tears_down_first() -> None:
    actions = layout.plan_node(want([], enabled=False), snapshot())
    commands = argv(actions)
    assert commands[:4] == [f"nvidia-smi mig -i 0 -gi {gi} -ci 0 -dci" for gi in (3, 9, 10, 2)]
    assert commands[4:8] == [f"nvidia-smi mig -i 0 -gi {gi} -dgi" for gi in (3, 9, 10, 2)]
    assert commands[8] == "nvidia-smi -i 0 -mig 0"
    assert layout.plan_node(want([], enabled=False), snapshot(current=False)) == []


def test_a_gpu_needs_a_list_of_actions_and_the_mode_kinds_stop_the_whole_gpu_holders() -> None:
    """One GPU's steps are plain actions; a reset finishing a pending enable changes the mode as ``mig-mode``
    does, so the holders of the whole GPU are stopped around it, not only the instance holders."""
    gpu = snapshot(current=False, pending=True)["gpus"][0]
    steps = layout.gpu_steps(0, GpuLayout(True, BALANCED), gpu)
    assert [type(a) for a in steps] == [Action] * 5 and steps[0].kind == "reset"
    assert layout.gpu_steps(0, GpuLayout(True, BALANCED), snapshot()["gpus"][0]) == []
    units = {"kubelet.service", "nvidia-persistenced.service"}
    actions = layout.plan_node(want(BALANCED), snapshot(current=False, pending=True), active_units=units)
    assert argv(actions)[0] == "systemctl stop kubelet.service nvidia-persistenced.service"
    assert [a.kind for a in actions if a.kind in layout.MODE_KINDS] == ["reset"]


def test_missing_gpu_and_failed_nvidia_smi_are_refused() -> None:
    missing = layout.plan_node({3: GpuLayout(True, BALANCED)}, snapshot())
    assert [str(a) for a in missing] == ["GPU 3: refused: GPU 3 is not on this node"]
    broken = layout.plan_node(want(BALANCED), {"smi_rc": 9, "error": "NVIDIA-SMI has failed", "gpus": []})
    assert [a.kind for a in broken] == ["refuse"] and "NVIDIA-SMI has failed" in str(broken[0])


def test_migparted_entries_select_gpus_by_device_id_and_index() -> None:
    gpus = snapshot(count=2)["gpus"]
    doc = {"version": "v1", "mig-configs": {"n": [
        {"device-filter": ["0x20B210DE"], "devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
        {"device-filter": "0x233510de", "devices": [1], "mig-enabled": True, "mig-devices": {"3g.71gb": 2}},
        {"devices": [0], "mig-enabled": False},
    ]}}
    selected = [(g["index"], [g["pci_device_id"]]) for g in gpus]
    assert migparted.requested(doc, None, selected) == {
        0: MigLayout(enabled=False, profiles={}), 1: MigLayout(enabled=True, profiles={"3g.71gb": 2})}
    with pytest.raises(ValueError, match="no config named 'x'"):
        migparted.requested(doc, "x", selected)


# --- the controller's typed entry points -----------------------------------------------------------------------


def test_example_cluster_node_plan() -> None:
    """inventory/cluster.yaml's h200-01: GPUs 0-6 balanced, GPU 7 whole; all eight MIG-disabled now."""
    node = load_cluster(REPO / "inventory" / "cluster.yaml").node("h200-01")
    snap = snapshot(current=False, count=8)
    actions = mig_actions(node.mig.planned, snap)
    modes = [a.gpu for a in actions if a.kind == "mig-mode"]
    assert modes == list(range(7))
    creates = [(a.gpu, a.profile, a.start) for a in actions if a.kind == "create-gi"]
    assert creates[:4] == [(0, "3g.71gb", 4), (0, "2g.35gb", 0), (0, "1g.18gb", 2), (0, "1g.18gb", 3)]
    assert len(creates) == 28 and all(g != 7 for g, _, _ in creates)


def test_drift_lines() -> None:
    layouts = {0: GpuLayout(True, TWO_3G)}
    assert [str(d) for d in layout_drift(layouts, snapshot())] == [
        "GPU 0: expected 3g.71gb@0:4, 3g.71gb@4:4; found 2g.35gb@0:2, 1g.18gb@2:1, 1g.18gb@3:1, 3g.71gb@4:4"]
    assert [str(d) for d in layout_drift(layouts, snapshot(current=False, pending=True))] == [
        "GPU 0: expected 3g.71gb@0:4, 3g.71gb@4:4; found MIG enable pending"]
    balanced = {0: GpuLayout(True, BALANCED)}
    assert layout_drift(balanced, snapshot()) == []


def test_drift_is_structured() -> None:
    """Drift names the GPU and carries both layouts; nothing needs to read the text back."""
    [drift] = layout_drift({0: GpuLayout(True, TWO_3G)}, snapshot())
    assert (drift.gpu, drift.expected, drift.found) == (0, GpuLayout(True, TWO_3G), GpuLayout(True, BALANCED))
    [pending] = layout_drift({0: GpuLayout(True, TWO_3G)}, snapshot(current=False, pending=True))
    assert pending.found == GpuLayout(False) and pending.found_text == "MIG enable pending"
    [off] = layout_drift({0: GpuLayout(False)}, snapshot())
    assert str(off.expected) == "MIG disabled" and off.found == GpuLayout(True, BALANCED)
    [empty] = layout_drift({0: GpuLayout(True)}, snapshot())
    assert str(empty) == ("GPU 0: expected MIG enabled, no instances; found 2g.35gb@0:2, 1g.18gb@2:1, 1g.18gb@3:1, "
                          "3g.71gb@4:4")
    [absent] = layout_drift({5: GpuLayout(True, TWO_3G)}, snapshot())
    assert absent.found is None and absent.found_text == "no such GPU"


def test_placements_are_planned_once_by_the_resolve_step() -> None:
    """A layout the resolve step did not plan is refused, never planned again elsewhere; the resolved node carries
    the planned GpuLayout, and its actions create exactly those placements."""
    cluster = load_cluster(REPO / "inventory" / "cluster.yaml")
    node = replace(cluster.node("h200-01"), mig=Mig({0: MigLayout({"3g.71gb": 2})}))
    with pytest.raises(ValueError, match="never planned"):
        assert node.mig.planned is None
    [resolved] = derive(replace(cluster, nodes=(node,))).nodes
    assert resolved.mig.planned == {0: GpuLayout(True, TWO_3G)}
    actions = mig_actions(resolved.mig.planned, snapshot(current=False))
    assert argv(actions)[1:3] == ["nvidia-smi mig -i 0 -cgi 3g.71gb:0 -C", "nvidia-smi mig -i 0 -cgi 3g.71gb:4 -C"]


def test_the_node_plans_the_layout_file_to_the_controllers_layouts(h200_table: dict) -> None:
    """The node applier plans the layout file's counts itself, with the same search on the driver's tables, and
    gets exactly the GpuLayouts the resolve step stored for the node (the placements do not travel)."""
    node = load_cluster(REPO / "inventory" / "cluster.yaml").node("h200-01")
    doc = install.layout_document(node)
    probed = snapshot(current=False, count=node.gpus.count)
    probed["tables"] = {str(g["index"]): h200_table for g in probed["gpus"]}
    assert apply.desired_for(doc, node.name, probed) == node.mig.planned
    assert {type(lay) for lay in migparted.requested(doc, node.name, [(0, ["0x233510de"])]).values()} == {MigLayout}
