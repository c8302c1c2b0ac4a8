"""Checks only report; the resolve step derives values once the file is valid."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpu_provision.errors import SpecError
from gpu_provision.spec import load_cluster
from gpu_provision.spec.context import Context
from gpu_provision.spec.loader import _node
from gpu_provision.spec.model import MigLayout, SshSettings
from gpu_provision.spec.resolve import Inherited, mig_strategy_for, resolve_node
from gpu_provision.spec.yamlsafe import load_yaml

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "gpu_provision" / "spec"


def _imports(module: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_checks_and_loader_do_not_import_each_other_back() -> None:
    assert not any(n.startswith("gpu_provision.spec.loader") for n in _imports(SPEC / "semantics.py"))
    assert not any(n.startswith("gpu_provision.spec.loader") for n in _imports(SPEC / "resolve.py"))
    assert not any(n.startswith("gpu_provision.spec.semantics") for n in _imports(SPEC / "resolve.py"))


def test_mig_strategy_for_layouts() -> None:
    one = MigLayout(profiles={"1g.18gb": 7})
    assert mig_strategy_for({0: one, 1: one}) == "single"
    assert mig_strategy_for({0: one, 1: MigLayout(profiles={"1g.18gb": 6})}) == "mixed"
    assert mig_strategy_for({0: MigLayout(profiles={"1g.18gb": 2, "3g.71gb": 1})}) == "mixed"
    assert mig_strategy_for({0: one, 1: MigLayout(profiles={}, enabled=False)}) == "mixed"


def test_derived_values_are_filled_in_after_the_checks(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(
        "version: v1\ncluster: {name: t, kubernetes: {enabled: false}}\nnodes:\n"
        "  - {name: a, address: 127.0.0.1, gpus: {model: H200, count: 2}, mig: {layout: {'1g.18gb': 7}}}\n"
        "  - {name: b, address: 127.0.0.2, gpus: {model: H200, count: 1}, mig: {layout: {'3g.71gb': 1, '1g.18gb': 2}}}\n"
        "  - {name: c, address: 127.0.0.3, gpus: {model: H200, count: 1}}\n")
    cluster = load_cluster(tmp_path / "c.yaml")
    a, b, c = cluster.nodes
    assert a.device_plugin.mig_strategy == "single" and b.device_plugin.mig_strategy == "mixed"
    assert c.device_plugin.mig_strategy == "none"
    assert [len(layout.planned.placements) for layout in a.mig.layouts.values()] == [7, 7]
    assert sorted(p.profile for p in b.mig.planned[0].placements) == ["1g.18gb", "1g.18gb", "3g.71gb"]


def _group_file(tmp_path: Path, group: str, nodes: str) -> Path:
    """A cluster file with one group ``h200`` (its settings: ``group``) and ``nodes`` (YAML list lines)."""
    path = tmp_path / "cluster.yaml"
    path.write_text("version: v1\ncluster: {name: c, kubernetes: {enabled: false}}\ngroups:\n  h200:\n"
                    + group + "nodes:\n" + nodes)
    return path


def test_nodes_of_one_group_share_their_parts_but_keep_their_own_name_address_and_line(tmp_path: Path) -> None:
    path = _group_file(tmp_path, """\
    gpus: {model: H200, count: 8}
    mig: {layout: {"3g.71gb": 2}}
    driver: {branch: 580}
""", """\
  - {name: a, address: 192.0.2.1, group: h200}
  - {name: b, address: 192.0.2.2, group: h200}
  - {name: c, address: 192.0.2.3, group: h200, labels: {rack: r1}}
""")
    a, b, c = load_cluster(path).nodes
    assert [(n.name, n.address, n.line) for n in (a, b, c)] == [
        ("a", "192.0.2.1", 9), ("b", "192.0.2.2", 10), ("c", "192.0.2.3", 11)]
    assert a is not b and a.driver is b.driver and a.mig.layouts == b.mig.layouts
    assert a.labels == {} and c.labels == {"rack": "r1"}
    assert a.mig.planned and a.mig.planned == b.mig.planned


_NODES = "".join(f"  - {{name: {n}, address: 192.0.2.{i}, group: h200}}\n" for i, n in enumerate("abc", 1))


@pytest.mark.parametrize(("group", "nodes", "problem"), [
    # Found while building the nodes: a node with a problem is never shared, so each is built and reports it.
    ('    gpus: {model: H200, count: 2}\n    mig: {gpus: {"5": {layout: {"3g.71gb": 2}}}}\n', 2,
     "GPU index 5 does not exist"),
    # Found by the check of meaning: building finds nothing, so b and c are copies of a; the check finds the branch
    # too old on a, so it runs again on its copies, and each node's problem is reported (a copy of a clean node is
    # not checked).
    ("    gpus: {model: H200, count: 8}\n    driver: {branch: 470}\n", 3,
     "driver branch 470 does not support H200"),
])
def test_a_problem_in_a_shared_group_setting_is_reported_on_every_node_of_it(tmp_path: Path, group: str, nodes: int,
                                                                            problem: str) -> None:
    path = _group_file(tmp_path, group, "".join(_NODES.splitlines(keepends=True)[:nodes]))
    with pytest.raises(SpecError) as caught:
        load_cluster(path)
    located = [(p.path, p.message) for p in caught.value.problems]
    assert len(located) == nodes, located
    assert all(problem in message for _, message in located)


def test_a_copy_of_a_clean_node_is_recorded_against_the_node_it_copies(tmp_path: Path) -> None:
    path = _group_file(tmp_path, "    gpus: {model: H200, count: 8}\n", """\
  - {name: a, address: 192.0.2.1, group: h200}
  - {name: b, address: 192.0.2.2, group: h200}
  - {name: c, address: 192.0.2.3, group: h200, labels: {rack: r1}}
  - {name: d, address: 192.0.2.4, group: h200}
""")
    document, positions = load_yaml(path.read_bytes(), str(path), fast=True)
    ctx = Context(document=document, positions=positions, filename=str(path), base_dir=tmp_path)
    inherited: Inherited = {}
    nodes = [_node(ctx, i, resolve_node(document, i, inherited)[0], SshSettings()) for i in range(4)]
    assert ctx.copies == {1: 0, 3: 0}
    assert [n.name for n in nodes] == ["a", "b", "c", "d"] and nodes[1].gpus is nodes[0].gpus
