"""Verification under DRA: the node's ResourceSlices list its GPUs and MIG devices as the cluster file says."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gpu_provision.node.verify import registry, slices
from gpu_provision.spec import load_cluster
from gpu_provision.verify.expect import from_node

SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "dra" / "resourceslices.json"

CLUSTER = """\
version: v1
cluster:
  name: dra
  kubernetes: {gpu_allocation: dra}
nodes:
  - {name: cp-1, address: 10.30.0.10, role: control-plane}
  - name: gpu-1
    address: 10.30.0.11
    gpus: {model: H200, count: 2}
    mig:
      layout: {"1g.18gb": 7}
      gpus:
        "1": {enabled: false}
"""


@pytest.fixture
def expect(tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "cluster.yaml"
    path.write_text(textwrap.dedent(CLUSTER))
    cluster = load_cluster(path)
    return from_node(cluster.node("gpu-1"), True, cluster.kubernetes.dra).to_dict()


@pytest.fixture
def sample() -> dict[str, Any]:
    return json.loads(SAMPLE.read_text())


def test_expectations_name_devices_not_allocatable(expect: dict[str, Any]) -> None:
    kube = expect["kubernetes"]
    assert kube["allocation"] == "dra" and kube["allocatable"] == {}
    # GPU 0 is listed by its seven MIG devices only, GPU 1 whole.
    assert kube["devices"] == {"gpu": 1, "mig-1g.18gb": 7}


def test_devices_counts_this_node_newest_generation(sample: dict[str, Any]) -> None:
    assert slices.devices(sample, "gpu-1") == {"gpu": 1, "mig-1g.18gb": 7}
    assert slices.devices(sample, "gpu-2") == {"gpu": 1}
    assert slices.devices(sample, "gpu-3") == {}


def test_slice_check_passes_on_the_sample(sample: dict[str, Any], expect: dict[str, Any]) -> None:
    check = slices.slice_check(sample, None, expect)
    assert check.status == "pass" and check.id == "node.kubernetes.allocatable"


def test_slice_check_names_what_differs(sample: dict[str, Any], expect: dict[str, Any]) -> None:
    sample["items"][1]["spec"]["devices"] = sample["items"][1]["spec"]["devices"][:5]
    check = slices.slice_check(sample, None, expect)
    assert check.status == "fail"
    assert check.reason == "ResourceSlice of gpu.nvidia.com differs: gpu=0 (want 1), mig-1g.18gb=5 (want 7)"
    failed = slices.slice_check(None, "kubectl get resourceslices failed: forbidden", expect)
    assert failed.status == "fail" and "forbidden" in failed.reason


def test_the_registry_row_judges_slices_under_dra(sample: dict[str, Any], expect: dict[str, Any]) -> None:
    row = next(r for r in registry.CHECKS if r.id == "node.kubernetes.allocatable")
    assert row.check((sample, None), expect).status == "pass"


def test_read_settled_waits_for_the_devices(monkeypatch: pytest.MonkeyPatch, sample: dict[str, Any]) -> None:
    answers = [{"items": []}, sample]
    monkeypatch.setattr(slices, "read", lambda spec: (answers.pop(0), None))
    now = iter(range(100))
    spec = {"node_name": "gpu-1", "devices": {"gpu": 1, "mig-1g.18gb": 7}}
    found, error = slices.read_settled(spec, clock=lambda: next(now), sleep=lambda s: None)
    assert error is None and found is sample and not answers
