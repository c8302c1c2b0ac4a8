"""Validation messages a person can act on: file order, "did you mean", YAML 1.1 traps quoted as written, a
mig-parted file given as the cluster file, and a vGPU host refused a repository driver."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_provision.errors import SpecError
from gpu_provision.spec import load_cluster
from gpu_provision.spec.settings import SCHEMA
from gpu_provision.spec.yamlsafe import load_yaml

HEAD = "version: v1\ncluster:\n  name: t\n  kubernetes: {enabled: false}\n"


def problems(tmp_path: Path, text: str) -> list[str]:
    """Every problem line (``LINE:COL: PATH: MESSAGE``, file name left out) reported for ``text``."""
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as caught:
        load_cluster(path)
    return [str(p)[len(f"{path}:"):] for p in caught.value.problems]


def test_schema_problems_come_in_file_order_not_deepest_first(tmp_path: Path) -> None:
    text = ("version: v1\n"
            "colour: blue\n"
            "cluster:\n"
            "  name: t\n"
            "  kubernetes: {enabled: false, cni: weave}\n"
            "nodes:\n"
            "  - name: n1\n"
            "    address: 10.0.0.1\n"
            "    role: master\n"
            "    gpus: {count: -1}\n")
    assert problems(tmp_path, text) == [
        "2:1: $.colour: unknown key 'colour' (allowed: cluster, defaults, groups, nodes, version)",
        "5:37: $.cluster.kubernetes.cni: 'weave' is not allowed (allowed: flannel, calico, cilium)",
        "9:11: $.nodes[0].role: 'master' is not allowed (allowed: control-plane, worker)",
        "10:19: $.nodes[0].gpus.count: -1 is out of range (allowed: at least 0)",
    ]


def test_checks_of_meaning_come_in_file_order(tmp_path: Path) -> None:
    text = HEAD + ("nodes:\n"
                   "  - name: n1\n"
                   "    address: 10.0.0.1\n"
                   "    group: missing\n"
                   "    sharing: {strategy: time-slicing, replicas: 2}\n")
    found = problems(tmp_path, text)
    assert [p.split(": ")[1] for p in found] == ["$.nodes[0].group", "$.nodes[0].sharing.strategy"]


def test_problems_in_the_cluster_file_come_before_those_in_a_file_it_names(tmp_path: Path) -> None:
    (tmp_path / "mig.yaml").write_text("version: v1\nmig-configs: [\n")
    text = HEAD.replace("  kubernetes", "  mig_parted_file: mig.yaml\n  kubernetes") + \
        "nodes:\n  - name: n1\n    address: 10.0.0.1\n    group: missing\n"
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as caught:
        load_cluster(path)
    assert [(p.file, p.line) for p in caught.value.problems] == [(str(path), 9), (str(tmp_path / "mig.yaml"), 3)]


def test_problems_at_one_place_keep_one_stable_order(tmp_path: Path) -> None:
    text = HEAD + "nodes:\n  - {name: n1, address: 10.0.0.1, colour: blue, size: 2}\n"
    first = problems(tmp_path, text)
    assert first == problems(tmp_path, text)
    allowed = ", ".join(sorted(SCHEMA["properties"]["nodes"]["items"]["properties"]))
    assert [p.split(": ", 2)[2] for p in first] == [f"unknown key 'colour' (allowed: {allowed})",
                                                    f"unknown key 'size' (allowed: {allowed})"]


@pytest.mark.parametrize(("key", "hint"), [
    ("modle", "did you mean 'model'?"),
    ("cuont", "did you mean 'count'?"),
    ("vendor", "allowed: count, model"),
    ("colour", "allowed: count, model"),
])
def test_unknown_key_names_the_closest_allowed_key_only_when_close(tmp_path: Path, key: str, hint: str) -> None:
    text = HEAD + f"nodes:\n  - name: n1\n    address: 10.0.0.1\n    gpus: {{{key}: H200}}\n"
    assert problems(tmp_path, text) == [f"8:12: $.nodes[0].gpus.{key}: unknown key '{key}' ({hint})"]


def test_each_unknown_key_is_its_own_problem(tmp_path: Path) -> None:
    text = HEAD + "nodes:\n  - name: n1\n    address: 10.0.0.1\n    gpus: {modle: H200, cuont: 1}\n"
    assert problems(tmp_path, text) == ["8:12: $.nodes[0].gpus.modle: unknown key 'modle' (did you mean 'model'?)",
                                        "8:25: $.nodes[0].gpus.cuont: unknown key 'cuont' (did you mean 'count'?)"]


@pytest.mark.parametrize(("written", "reading"), [
    ("012", "the number 10"),
    ("no", "the boolean false"),
    ("yes", "the boolean true"),
    ("on", "the boolean true"),
    ("off", "the boolean false"),
    ("12.10", "the number 12.1"),
    ("1_000", "the number 1000"),
    ("0x1f", "the number 31"),
    ("~", "null (no value)"),
    ("2026-01-01", "the date 2026-01-01"),
])
def test_yaml_1_1_traps_say_quote_it_with_the_value_as_written(tmp_path: Path, written: str, reading: str) -> None:
    text = HEAD + f"nodes:\n  - name: n1\n    address: {written}\n"
    assert problems(tmp_path, text) == [f"7:14: $.nodes[0].address: {written} is read by YAML as {reading}, "
                                        f"not as text (quote it: '{written}')"]


def test_quoted_values_are_text(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    # '012' was the address here until all-digit host names were refused (RFC 1123: inet_aton reads it as 0.0.0.10)
    path.write_text(HEAD + "nodes:\n  - name: n1\n    address: 'yes'\n    labels: {ecc: \"no\"}\n")
    node = load_cluster(path).nodes[0]
    assert node.address == "yes" and node.labels == {"ecc": "no"}


@pytest.mark.parametrize(("setting", "written", "value"), [
    ("cuda_min", "12.10", "12.1"),
    ("branch", "0x244", "580"),
])
def test_numbers_a_setting_accepts_are_refused_when_yaml_changes_them(tmp_path: Path, setting: str, written: str,
                                                                      value: str) -> None:
    text = HEAD + f"nodes:\n  - name: n1\n    address: 10.0.0.1\n    driver:\n      {setting}: {written}\n"
    assert problems(tmp_path, text) == [f"9:{9 + len(setting)}: $.nodes[0].driver.{setting}: {written} is read by "
                                        f"YAML as the number {value}, not as text (quote it: '{written}')"]


def test_a_number_out_of_range_because_yaml_read_it_as_octal_says_quote_it(tmp_path: Path) -> None:
    text = HEAD + "nodes:\n  - name: n1\n    address: 10.0.0.1\n    driver: {branch: 012}\n    toolkit: {cdi: 1}\n"
    assert problems(tmp_path, text) == [
        "8:22: $.nodes[0].driver.branch: 012 is read by YAML as the number 10, not as text (quote it: '012')",
        "9:20: $.nodes[0].toolkit.cdi: expected boolean, got a number 1"]


def test_numbers_yaml_keeps_as_written_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(HEAD + "nodes:\n  - name: n1\n    address: 10.0.0.1\n"
                           "    driver: {branch: 580, cuda_min: 12.4}\n    permissions: {group: gpu, mode: 0660}\n")
    node = load_cluster(path).nodes[0]
    assert (node.driver.branch, node.driver.cuda_min, node.permissions.mode) == ("580", "12.4", "0660")


@pytest.mark.parametrize(("line", "shown"), [
    ("role: master", "'master'"),
    ("role: 'master'", "'master'"),
    ('role: "master"', '"master"'),
    ("role: 7", "7"),
])
def test_values_are_shown_as_written_not_as_python_reprs(tmp_path: Path, line: str, shown: str) -> None:
    text = HEAD + f"nodes:\n  - name: n1\n    address: 10.0.0.1\n    {line}\n"
    assert problems(tmp_path, text) == [f"8:11: $.nodes[0].role: {shown} is not allowed (allowed: control-plane, "
                                        "worker)"]


def test_type_errors_name_what_yaml_read(tmp_path: Path) -> None:
    text = HEAD + "  ssh: {port: [22], strict_host_key_checking: maybe, user: }\nnodes:\n  - {name: n1, address: a}\n"
    assert problems(tmp_path, text) == [
        "5:15: $.cluster.ssh.port: expected integer, got a list",
        "5:47: $.cluster.ssh.strict_host_key_checking: expected boolean, got text 'maybe'",
        "5:59: $.cluster.ssh.user: expected string, got no value",
    ]


def test_messages_name_settings_as_the_file_writes_them(tmp_path: Path) -> None:
    text = HEAD + ("nodes:\n  - name: n1\n    address: 10.0.0.1\n    gpus: {model: H200, count: 1}\n"
                   "    mig:\n      gpus:\n        '0': {layout: {7g.141gb: 1}, config: all-7g}\n")
    assert problems(tmp_path, text) == [
        "11:46: $.nodes[0].mig.gpus.0.config: give either mig.gpus.0.layout or mig.gpus.0.config, not both",
        "11:46: $.nodes[0].mig.gpus.0.config: mig.gpus.0.config names a mig-parted config, but "
        "cluster.mig_parted_file is not set"]


def test_a_mig_parted_file_given_as_the_cluster_file_is_named_so(tmp_path: Path) -> None:
    text = "version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: false\n"
    assert problems(tmp_path, text) == [
        "2:1: $: this is a mig-parted file, not a cluster file: name it in the cluster file as "
        "cluster.mig_parted_file and pick one of its configs with mig.config on a node (see docs/cluster-file.md)"]


VGPU = HEAD + "nodes:\n  - name: n1\n    address: 10.0.0.1\n    gpus: {model: H100-80GB, count: 2}\n" \
              "    vgpu: {type: NVIDIA H100XM-40C}\n"
VGPU_REFUSAL = ("a vGPU host needs NVIDIA's vGPU Manager, not the data-center driver that driver.install_method: "
                "package installs: install the vGPU Manager from the NVIDIA Licensing Portal and set "
                "driver.install_method: preinstalled (allowed: preinstalled)")


def test_a_vgpu_host_with_the_repository_driver_is_refused_at_its_vgpu_settings(tmp_path: Path) -> None:
    assert problems(tmp_path, VGPU) == [f"9:11: $.nodes[0].vgpu: {VGPU_REFUSAL}"]


def test_a_vgpu_host_refusal_points_at_an_explicit_install_method(tmp_path: Path) -> None:
    text = VGPU + "    driver: {install_method: package}\n"
    assert problems(tmp_path, text) == [f"10:30: $.nodes[0].driver.install_method: {VGPU_REFUSAL}"]


def test_a_vgpu_host_with_a_preinstalled_vgpu_manager_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(VGPU + "    driver: {install_method: preinstalled}\n")
    node = load_cluster(path).nodes[0]
    assert node.vgpu == {0: "NVIDIA H100XM-40C", 1: "NVIDIA H100XM-40C"}
    assert node.driver.install_method == "preinstalled"


def test_positions_keep_each_scalar_as_written() -> None:
    doc, positions = load_yaml("a: 012\nb: 'no'\nc: {d: 12.10}\ne: [x, \"y\"]\n", "f.yaml")
    assert doc == {"a": 10, "b": "no", "c": {"d": 12.1}, "e": ["x", "y"]}
    assert [positions.written(p) for p in [("a",), ("b",), ("c", "d"), ("e", 1), ("c",)]] == \
        ["012", "'no'", "12.10", '"y"', None]
    assert [positions.plain(p) for p in [("a",), ("b",), ("c", "d"), ("e", 1), ("c",)]] == \
        [True, False, True, False, False]
