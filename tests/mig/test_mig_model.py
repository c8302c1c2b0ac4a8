"""The one MIG model: its types, the one placement search, the one mig-parted reader, the one decision on which
units hold a GPU, and a look through the package proving there is no second of any of them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpu_provision.commands import mig as mig_command
from gpu_provision.node.mig import holders, migparted, placement
from gpu_provision.node.mig.model import GpuLayout, MigLayout, Placement, ProfileTable, fmt_placements
from gpu_provision.operations import mig as mig_ops
from gpu_provision.spec import catalog, load_cluster
from gpu_provision.spec.migparted import layouts_for, node_config
from gpu_provision.state import NodeStateData
from gpu_provision.verify.expect import from_node

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "gpu_provision"
H200 = catalog.model("H200")


def sources() -> dict[str, str]:
    return {str(p.relative_to(REPO)): p.read_text() for p in sorted(PACKAGE.rglob("*.py")) if "vendor" not in p.parts}


# --- the types ----------------------------------------------------------------------------------------------------


def test_layout_text() -> None:
    assert str(Placement("3g.71gb", 4, 4)) == "3g.71gb@4:4"
    assert list(Placement("3g.71gb", 4, 4).slices) == [4, 5, 6, 7]
    assert fmt_placements([Placement("3g.71gb", 4, 4), Placement("2g.35gb", 0, 2)]) == "2g.35gb@0:2, 3g.71gb@4:4"
    assert fmt_placements([]) == "none"
    assert str(GpuLayout(False)) == "MIG disabled"
    assert str(GpuLayout(True)) == "MIG enabled, no instances"
    assert str(GpuLayout(True, (Placement("7g.141gb", 0, 8),))) == "7g.141gb@0:8"


def test_profile_table_from_the_model_file_keeps_its_facts_out_of_comparisons() -> None:
    doc = json.loads((PACKAGE / "data" / "gpus" / "H200.json").read_text())["mig"]
    table = ProfileTable.from_dict(doc)
    assert table == H200.mig and table.min_driver == doc["min_driver"]
    driver_like = {k: v for k, v in doc.items() if k not in ("min_driver", "placements_source")}
    assert ProfileTable.from_dict(driver_like) == table
    assert table.profile("MIG 3g.71gb") is table.profile("9") is table.profile("3g.71gb")
    assert table.profile("3g.40gb") is None


def test_placements_read_from_any_mapping_and_layouts_equal_in_any_order() -> None:
    row = {"gpu": 0, "profile": "3g.71gb", "profile_id": 9, "instance_id": 2, "start": 4, "size": 4}
    assert Placement.from_dict(row) == Placement.from_dict({"profile": "3g.71gb", "start": "4", "size": "4"}) == \
        Placement("3g.71gb", 4, 4)
    small, large = Placement("1g.18gb", 0, 1), Placement("3g.71gb", 4, 4)
    assert GpuLayout.placed([large, small]) == GpuLayout.placed([small, large]) == GpuLayout(True, (small, large))


def test_the_cluster_model_verification_and_plan_share_the_type() -> None:
    node = load_cluster(REPO / "inventory" / "cluster.yaml").node("h200-01")
    placements = node.mig.planned[0].placements
    assert all(type(p) is Placement for p in placements)
    assert from_node(node).mig[0] == GpuLayout(True, placements)


# --- the placement search -----------------------------------------------------------------------------------------


def test_plan_refuses_what_cannot_be_placed() -> None:
    table = H200.mig
    assert placement.plan(table, {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}) == (
        Placement("2g.35gb", 0, 2), Placement("1g.18gb", 2, 1), Placement("1g.18gb", 3, 1), Placement("3g.71gb", 4, 4))
    assert placement.plan(table, {"3g.40gb": 1}) is None
    assert placement.plan(table, {"3g.71gb": 3}) is None
    assert placement.plan(table, {"1g.18gb+me": 2}) is None
    assert placement.plan(table, {"2g.35gb": 3, "1g.18gb": 2}) is None


def test_search_reports_how_far_it_got() -> None:
    table = H200.mig
    found = placement.search(table, placement.instances(table, {"2g.35gb": 3, "1g.18gb": 2}))
    assert found.placements is None
    assert found.failed is not None and found.failed.name == "1g.18gb"
    assert Placement("2g.35gb", 0, 2) in found.partial
    with pytest.raises(placement.UnknownProfile) as info:
        placement.instances(table, {"3g.40gb": 1})
    assert info.value.name == "3g.40gb"
    assert placement.over_limit(table, {"1g.18gb": 8}) == (table.profile("1g.18gb"), 8)
    assert placement.media_extensions(table, {"1g.18gb+me": 1, "20": 1, "1g.18gb": 3}) == 2


def test_media_engine_rules_of_the_newer_suffixes() -> None:
    table = catalog.model("RTX-PRO-6000").mig
    assert table is not None
    assert placement.media_extensions(table, {"1g.24gb+me.all": 1, "1g.24gb+me": 1, "1g.24gb-me": 2}) == 2
    assert placement.beside_all_media(table, {"1g.24gb+me.all": 1, "1g.24gb-me": 3}) is None
    assert placement.beside_all_media(table, {"1g.24gb+gfx": 4}) is None
    assert placement.beside_all_media(table, {"2g.48gb+me.all": 1, "1g.24gb": 1}) == (
        table.profile("2g.48gb+me.all"), table.profile("1g.24gb"))
    assert placement.plan(table, {"2g.48gb+me.all": 1, "1g.24gb": 1}) is None
    assert placement.plan(table, {"1g.24gb+me.all": 1, "1g.24gb+me": 1}) is None
    assert placement.plan(table, {"2g.48gb+me.all": 1, "1g.24gb-me": 2}) == (
        Placement("2g.48gb+me.all", 0, 2), Placement("1g.24gb-me", 2, 1), Placement("1g.24gb-me", 3, 1))


# --- the mig-parted reader ----------------------------------------------------------------------------------------


def test_controller_and_node_read_the_layout_file_alike() -> None:
    """The layout file the deploy writes, read for the node's model (controller) and its probed GPUs (node)."""
    node = load_cluster(REPO / "inventory" / "cluster.yaml").node("h200-01")
    doc = migparted.document({node.name: node_config(node, H200)})
    assert migparted.check(doc) == []
    controller = layouts_for(doc, node.name, H200, node.gpus.count)
    on_node = migparted.requested(doc, None, [(i, ["0x233510de"]) for i in range(8)])
    assert {i: MigLayout(lay.profiles, lay.enabled) for i, lay in controller.items()} == on_node
    assert {i: MigLayout(lay.profiles, lay.enabled) for i, lay in node.mig.layouts.items()} == on_node
    assert migparted.requested(doc, None, [(0, ["0x20b210de"])]) == {}


def test_read_refuses_a_document_mig_parted_would_refuse(tmp_path: Path) -> None:
    path = tmp_path / "layout.yaml"
    path.write_text(json.dumps({"version": "v1", "mig-configs": {"n": [{"devices": "all", "mig-enabled": True,
                                                                        "placements": []}]}}))
    with pytest.raises(ValueError, match=r"not a mig-parted 'version: v1' document \(mig-configs\.n\.0\.placements: "
                                         r"unknown key 'placements'"):
        migparted.read(str(path))
    path.write_text(json.dumps({"version": "v1", "mig-configs": {"n": [{"devices": [0], "mig-enabled": False}]}}))
    assert migparted.read(str(path))["mig-configs"]["n"][0]["devices"] == [0]


# --- which units hold a GPU ---------------------------------------------------------------------------------------


def test_holding_states() -> None:
    states = {"kubelet.service": "active", "nvidia-dcgm.service": "activating", "dcgm-exporter.service": "reloading",
              "nvsm.service": "deactivating", "nvidia-persistenced.service": "failed",
              "nvidia-fabricmanager.service": None, "sshd.service": "active"}
    assert holders.holding(states) == {"kubelet.service", "nvidia-dcgm.service", "dcgm-exporter.service"}
    assert holders.holding({}) == set()
    assert set(holders.INSTANCE_HOLDERS) < set(holders.MODE_HOLDERS)


def test_the_deploy_and_mig_assert_use_the_one_decision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    services = {name: {"loaded": True, "enabled": "enabled", "active": "inactive"} for name in holders.MODE_HOLDERS}
    services["kubelet.service"]["active"] = "activating"
    services["nvidia-dcgm.service"]["active"] = "active"
    services["nvsm.service"].update(loaded=False, active="active")
    assert mig_ops.active_units(NodeStateData({"services": services})) == {"kubelet.service", "nvidia-dcgm.service"}
    # mig-assert and the node applier ask the local systemctl: one state per line, in argument order.
    systemctl = tmp_path / "systemctl"
    answers = {"kubelet.service": "reloading", "nvidia-persistenced.service": "active"}
    lines = "\\n".join(answers.get(u, "inactive") for u in sorted(holders.MODE_HOLDERS))
    systemctl.write_text(f"#!/bin/sh\nprintf '{lines}\\n'\nexit 3\n")
    systemctl.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert holders.running_holders() == set(answers)
    assert mig_command.running_holders is holders.running_holders


# --- one of each --------------------------------------------------------------------------------------------------


def test_one_placement_search_one_reader_one_holder_decision() -> None:
    """Only placement.py marks memory slices taken while it tries starts, only migparted.py reads a mig-parted
    entry, and only holders.py knows which unit states hold a GPU."""
    searches = re.compile(r"used\[\w+\]\s*=\s*True")
    reads = re.compile(r"""(\.get\(|\[)["'](device-filter|mig-devices|mig-enabled)["']""")
    states = re.compile(r"""["'](activating|reloading)["']|is-active""")
    found = {"search": [], "reader": [], "holders": []}
    for path, text in sources().items():
        if searches.search(text):
            found["search"].append(path)
        if reads.search(text):
            found["reader"].append(path)
        if states.search(text):
            found["holders"].append(path)
    assert found == {"search": ["gpu_provision/node/mig/placement.py"],
                     "reader": ["gpu_provision/node/mig/migparted.py"],
                     "holders": ["gpu_provision/node/mig/holders.py"]}
