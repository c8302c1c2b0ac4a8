"""When ``diagnose`` leaves the cluster file's declared state out of a node's findings (no cluster file, the node not
in it, the file invalid), it says why: in the bundle's ``expectations.json``, in the text summary and in the JSON
(``declared_state_left_out``); a node whose declared state was read says nothing of the kind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpu_provision.commands.diagnose import expectations_of, left_out_reason
from gpu_provision.doctor import DoctorExpectations, FleetDiagnosis, NodeDiagnosis
from gpu_provision.errors import SpecError, SpecProblem
from gpu_provision.inventory import NODE_ENV
from gpu_provision.spec.locate import CLUSTER_ENV
from gpu_provision.spec.settings import SCHEMA

ROOT = Path(__file__).resolve().parents[2]
VALID = {"version": "v1", "cluster": {"name": "left-out", "kubernetes": {"enabled": False}},
         "nodes": [{"name": "gpu-01", "address": "127.0.0.1", "gpus": {"model": "H200", "count": 1}}]}
INVALID = "version: v1\ncluster:\n  name: t\n  colour: blue\nnodes:\n  - {name: gpu-01, address: 999.1.1.1}\n"


def _host(name: str, cluster_file: str | None = None) -> Any:
    return SimpleNamespace(name=name, data={"gpu_provision_cluster_file": cluster_file} if cluster_file else {})


def _diagnose(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in (CLUSTER_ENV, NODE_ENV)}
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "rig"), environ.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "gpu_provision.cli", "diagnose", "@local", "--out", str(cwd / "out"),
                           "--no-bug-report", "--config", "absent.py", *args], cwd=cwd, env={**environ, **env},
                          capture_output=True, text=True, timeout=300)


def test_no_cluster_file_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(CLUSTER_ENV, raising=False)
    monkeypatch.setenv(NODE_ENV, "gpu-01")
    reason = expectations_of(_host("@local")).left_out
    assert reason and reason.startswith("no cluster file: set GPU_PROVISION_CLUSTER=FILE")


def test_a_node_outside_the_file_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(json.dumps(VALID))
    monkeypatch.setenv(NODE_ENV, "gpu-99")
    assert expectations_of(_host("@local", str(path))).left_out == f"{path}: no node named 'gpu-99'"
    monkeypatch.delenv(NODE_ENV)
    assert expectations_of(_host("@local", str(path))).left_out == \
        f"@local: set {NODE_ENV} to the node this host is in the cluster file"


def test_an_invalid_file_is_said_with_its_first_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(INVALID)
    monkeypatch.setenv(NODE_ENV, "gpu-01")
    reason = expectations_of(_host("@local", str(path))).left_out
    assert reason == (f"the cluster file {path} is invalid: {path}:4:3: $.cluster.colour: unknown key 'colour' "
                      f"(allowed: {', '.join(sorted(SCHEMA['properties']['cluster']['properties']))}) (and 1 more problem; "
                      f"gpu-provision validate {path} lists them)")


def test_a_node_the_file_names_has_nothing_left_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(json.dumps(VALID))
    monkeypatch.setenv(NODE_ENV, "gpu-01")
    expect = expectations_of(_host("@local", str(path)))
    assert expect.left_out is None and expect.to_json()["declared_state_left_out"] is None


def test_the_reason_is_one_line() -> None:
    problem = SpecProblem("c.yaml", 3, 5, "$.nodes[0].labels.a\nb", "'a\nb' is not allowed as a key here")
    reason = left_out_reason(SpecError([problem]))
    assert reason.splitlines() == [reason] and reason.startswith("the cluster file c.yaml is invalid: c.yaml:3:5: ")
    assert left_out_reason(ValueError("two\nlines")) == "ValueError: two\\nlines"


def test_the_reason_travels_in_the_bundle_and_the_summary() -> None:
    expect = DoctorExpectations(users=("alice",), left_out="no cluster file: set GPU_PROVISION_CLUSTER=FILE")
    assert DoctorExpectations.from_json(json.loads(json.dumps(expect.to_json()))) == expect
    left_out = NodeDiagnosis(node="gpu-01", archive="out/gpu-01.tar.gz", declared_state_left_out=expect.left_out)
    read = NodeDiagnosis(node="gpu-02", archive="out/gpu-02.tar.gz")
    summary = FleetDiagnosis(nodes=[left_out, read], out="out")
    assert [n["declared_state_left_out"] for n in summary.to_json()["nodes"]] == [expect.left_out, None]
    text = summary.render().splitlines()
    assert text[:3] == ["gpu-01: no findings (out/gpu-01.tar.gz)",
                        f"  declared state left out (known-fault rules only): {expect.left_out}",
                        "gpu-02: no findings (out/gpu-02.tar.gz)"]


def test_diagnose_without_a_cluster_file_says_so_in_its_text(tmp_path: Path) -> None:
    proc = _diagnose(tmp_path, {NODE_ENV: "gpu-01"})
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "  declared state left out (known-fault rules only): no cluster file: set GPU_PROVISION_CLUSTER=FILE" \
        in proc.stdout
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    [node] = summary["nodes"]
    assert node["declared_state_left_out"].startswith("no cluster file: ")
    with tarfile.open(node["bundle"]) as archive:
        kept = json.load(archive.extractfile("expectations.json"))  # type: ignore[arg-type]
    assert kept["declared_state_left_out"] == node["declared_state_left_out"]


@pytest.mark.parametrize(("text", "node", "reason"), [
    (INVALID, "gpu-01", "the cluster file {path} is invalid: {path}:4:3: $.cluster.colour: unknown key 'colour'"),
    (json.dumps(VALID), "gpu-99", "{path}: no node named 'gpu-99'"),
])
def test_diagnose_says_why_in_its_json(tmp_path: Path, text: str, node: str, reason: str) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    proc = _diagnose(tmp_path, {CLUSTER_ENV: str(path), NODE_ENV: node}, "--json")
    assert proc.returncode in (0, 1), proc.stderr
    [found] = json.loads(proc.stdout)["nodes"]
    assert found["error"] is None and found["declared_state_left_out"].startswith(reason.format(path=path))
