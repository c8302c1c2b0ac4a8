"""Hostile or careless cluster files end in located errors (exit 2, FILE:LINE:COL, no traceback), read boundedly.

Non-regular files and files over the size limit are refused before being read whole; every YAML tag outside plain
text, numbers, booleans, null, dates, lists and mappings is refused where it stands, keys included; merge keys
follow YAML merge semantics.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_provision.cli import main
from gpu_provision.errors import SpecError
from gpu_provision.spec import load_cluster
from gpu_provision.spec.yamlsafe import MAX_BYTES, load_yaml

BASE = """version: v1
cluster:
  name: t
  kubernetes: {enabled: false}
nodes:
  - name: n1
    address: 10.0.0.1
"""


def _validate(path: Path | str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    status = main(["validate", str(path)])
    out, err = capsys.readouterr()
    assert status == 2, out + err
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert lines and all(line.startswith(f"{path}:") for line in lines), err
    return lines


@pytest.mark.parametrize(("name", "message"), [("/dev/zero", "a device, FIFO or socket, not a regular file"),
                                               ("/", "a directory, not a regular file")])
def test_non_regular_cluster_file_is_refused(name: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _validate(name, capsys) == [f"{name}:1:1: $: cluster file is {message}"]


def test_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "cluster.yaml"
    os.mkfifo(fifo)
    assert _validate(fifo, capsys) == [f"{fifo}:1:1: $: cluster file is a device, FIFO or socket, not a regular file"]


def test_file_over_the_limit_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = tmp_path / "cluster.yaml"
    with big.open("wb") as out:
        out.truncate(MAX_BYTES * 50)
    assert _validate(big, capsys) == [f"{big}:1:1: $: cluster file is larger than {MAX_BYTES // 1024} KiB"]


@pytest.mark.parametrize("target", ["/dev/zero", "."])
def test_non_regular_mig_parted_file_is_refused(tmp_path: Path, target: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(BASE.replace("  name: t\n", f"  name: t\n  mig_parted_file: {target}\n"))
    lines = _validate(path, capsys)
    assert lines[0].startswith(f"{path}:4:20: $.cluster.mig_parted_file: mig-parted file is a ")
    assert "not a regular file" in lines[0]


HOSTILE = [
    ("    labels: {a: !!binary aGVsbG8=}", "8:17: $.nodes[0].labels.a: YAML tag '!!binary' is not supported here"),
    ("    labels: {? !!binary aGVsbG8= : b}", "8:16: $.nodes[0].labels: YAML tag '!!binary' is not supported on a key"),
    ("    labels: {a: !foo x}", "8:17: $.nodes[0].labels.a: YAML tag '!foo' is not supported here"),
    ("    labels: {!foo k: b}", "8:14: $.nodes[0].labels: YAML tag '!foo' is not supported on a key"),
    ("    labels: !!python/object:os.system {a: b}",
     "8:13: $.nodes[0].labels: YAML tag '!!python/object:os.system' is not supported here"),
    ("    taints: !!python/object/apply:os.system [a]",
     "8:13: $.nodes[0].taints: YAML tag '!!python/object/apply:os.system' is not supported here"),
    ("    labels: {? !!python/name:os.system x : b}",
     "8:16: $.nodes[0].labels: YAML tag '!!python/name:os.system' is not supported on a key"),
    ("    labels: !!set {a}", "8:13: $.nodes[0].labels: YAML tag '!!set' is not supported here"),
    ("    labels:\n      ? " + "1" * 5000 + "\n      : b", "9:9: $.nodes[0].labels: invalid key: "),
    ("    labels: {a: 2020-02-30}", "8:17: $.nodes[0].labels.a: invalid value: "),
    ("    labels: {2020-02-30: b}", "8:14: $.nodes[0].labels: invalid key: "),
    ("    labels: {a: 2020-01-01}", "8:17: $.nodes[0].labels.a: 2020-01-01 is read by YAML as the date"),
    ("    labels: {<<: [a]}", "8:19: $.nodes[0].labels: invalid merge key: '<<' takes a mapping or a list of mappings"),
]


@pytest.mark.parametrize(("extra", "expected"), HOSTILE, ids=[e.strip()[:40] for e, _ in HOSTILE])
def test_tags_and_scalars_are_handled_or_refused_where_they_stand(tmp_path: Path, extra: str, expected: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(BASE + extra + "\n")
    lines = _validate(path, capsys)
    assert any(line.startswith(f"{path}:{expected}") for line in lines), lines


def test_date_keys_are_text(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(BASE + "    labels: {2020-01-01: b}\n")
    assert load_cluster(path).node("n1").labels == {"2020-01-01": "b"}


def test_merge_keys_let_explicit_keys_override() -> None:
    doc, positions = load_yaml("base: &b {x: 1, y: 2}\nother: &o {y: 9, z: 3}\n"
                               "use:\n  <<: [*b, *o]\n  x: 5\n", "f.yaml")
    assert doc["use"] == {"x": 5, "y": 2, "z": 3}
    assert positions.of(("use", "x"), key=True) == (5, 3)


def test_merge_keys_in_a_cluster_file(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(BASE.replace("  - name: n1\n    address: 10.0.0.1\n",
                                 "  - &n {name: n1, address: 10.0.0.1, role: worker}\n"
                                 "  - <<: *n\n    name: n2\n    address: 10.0.0.2\n"))
    cluster = load_cluster(path)
    assert [(n.name, n.address) for n in cluster.nodes] == [("n1", "10.0.0.1"), ("n2", "10.0.0.2")]


def test_explicit_duplicates_are_still_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(BASE + "    labels: {<<: {a: b}, c: d, c: e}\n")
    assert _validate(path, capsys) == [f"{path}:8:32: $.nodes[0].labels.c: duplicate key 'c' (first given on line 8)"]


#: One YAML scalar or collection of each hostile class, written as a value or a key would be.
HOSTILE_SCALARS = st.sampled_from([
    "2020-01-01", "2020-02-30", "2001-12-14t21:59:43.10-05:00", "!!binary aGVsbG8=", "!!timestamp 2020-01-01",
    "!foo x", "!!python/object:os.system x", "!!python/name:os.system x", "!!set {a}", "!!omap [a: 1]",
    ".nan", "-.inf", "1e400", "0x1F", "0o17", "1_000", "9" * 5000, "'a\\nb'", '"a\\nb"', '"\\x00"', '"-oX=y"',
    "~", "yes", "012", "[1, {a: b}]", "{<<: {a: 1}, a: 2}", "*nothere",
])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(HOSTILE_SCALARS, st.sampled_from(["name", "address", "role", "labels", "taints", "gpus", "mig", "driver"]),
       st.booleans())
def test_any_hostile_scalar_anywhere_is_clean_or_located(tmp_path: Path, scalar: str, key: str, as_key: bool) -> None:
    path = tmp_path / "cluster.yaml"
    entry = f"    ? {scalar}\n    : x\n" if as_key else f"    {key}: {scalar}\n"
    path.write_text(BASE.replace("  - name: n1\n    address: 10.0.0.1\n",
                                 "  - name: n1\n" + ("    address: 10.0.0.1\n" if key != "address" else "") + entry))
    try:
        load_cluster(path)
    except SpecError as exc:
        assert exc.problems
        for problem in exc.problems:
            assert problem.file == str(path) and problem.line >= 1 and problem.path.startswith("$")
