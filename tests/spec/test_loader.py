"""Loading the example cluster: inheritance, derived settings, placements, mig-parted round trip."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpu_provision.cli import main
from gpu_provision.node.mig.migparted import check
from gpu_provision.spec import catalog, load_cluster
from gpu_provision.spec.migparted import layouts_for

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventory" / "cluster.yaml"


def test_example_is_valid(capsys) -> None:
    assert main(["validate", str(EXAMPLE)]) == 0
    assert "valid (5 nodes)" in capsys.readouterr().out


def test_inheritance_node_over_group_over_defaults() -> None:
    cluster = load_cluster(EXAMPLE)
    h200 = cluster.node("h200-01")
    assert h200.gpus.model == "H200" and h200.gpus.count == 8          # from group h200-mig
    # The example leaves Fabric Manager to the node's PCI bus (auto) since that setting's default became auto.
    assert h200.driver.branch == "580" and h200.driver.fabric_manager == "auto"   # defaults
    assert h200.permissions.group == "gpu" and h200.permissions.mode == "0660"
    assert h200.labels == {"topology.kubernetes.io/zone": "rack-a"}     # node's own
    a100 = cluster.node("a100-01")
    assert a100.permissions.users == ("alice", "bob")
    assert a100.permissions.group == "gpu"                               # mapping merged, not replaced


def test_mixed_layout_per_gpu_and_placements() -> None:
    h200 = load_cluster(EXAMPLE).node("h200-01")
    assert sorted(h200.mig.layouts) == list(range(8))
    assert not h200.mig.layouts[7].enabled
    first = h200.mig.layouts[0]
    assert first.profiles == {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}
    assert [(p.profile, p.start) for p in first.planned.placements] == [
        ("2g.35gb", 0), ("1g.18gb", 2), ("1g.18gb", 3), ("3g.71gb", 4)]
    assert h200.device_plugin.mig_strategy == "mixed"


def test_layout_from_mig_parted_config() -> None:
    a100 = load_cluster(EXAMPLE).node("a100-01")
    assert all(layout.profiles == {"1g.10gb": 7} for layout in a100.mig.layouts.values())
    assert all(layout.config_name == "all-1g.10gb" for layout in a100.mig.layouts.values())


def test_example_covers_the_node_kinds() -> None:
    cluster = load_cluster(EXAMPLE)
    assert cluster.node("cp-01").role == "control-plane" and not cluster.node("cp-01").has_gpus
    assert cluster.node("l40s-01").sharing.strategy == "time-slicing"
    assert cluster.node("vgpu-01").vgpu == {0: "NVIDIA H100XM-40C", 1: "NVIDIA H100XM-40C"}


def test_export_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "exported.yaml"
    assert main(["export", "mig-parted", str(out), "--cluster", str(EXAMPLE)]) == 0
    doc = yaml.safe_load(out.read_text())
    assert check(doc) == []
    cluster = load_cluster(EXAMPLE)
    for name in ("h200-01", "a100-01"):
        node = cluster.node(name)
        back = layouts_for(doc, name, catalog.model(node.gpus.model), node.gpus.count)
        assert {i: (lay.enabled, lay.profiles) for i, lay in back.items()} == \
               {i: (lay.enabled, lay.profiles) for i, lay in node.mig.layouts.items()}


def test_unquoted_octal_mode_is_read_as_octal(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("version: v1\ncluster: {name: t, kubernetes: {enabled: false}}\n"
                    "nodes:\n  - {name: a, address: h, permissions: {group: gpu, mode: 0660}}\n")
    assert load_cluster(path).node("a").permissions.mode == "0660"


def test_mig_plan_command(capsys) -> None:
    assert main(["mig-plan", "--gpu", "H200", "1g.18gb x2 + 2g.35gb + 3g.71gb"]) == 0
    assert "memory slices: A A B C D D D D" in capsys.readouterr().out
    assert main(["mig-plan", "--gpu", "H200", "3g.71gb x3"]) == 1
    assert "does not fit" in capsys.readouterr().out
    assert main(["mig-plan", "--gpu", "Z9"]) == 2


def test_plan_command_json(capsys) -> None:
    import json

    assert main(["plan", str(EXAMPLE), "--json", "--node", "l40s-01"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan[0]["device_plugin"]["sharing"]["timeSlicing"]["resources"][0]["replicas"] == 4
