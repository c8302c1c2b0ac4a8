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


NFD_CLUSTER = CLUSTER.replace("kubernetes: {gpu_allocation: dra}",
                              "kubernetes: {gpu_allocation: dra, node_feature_discovery: true}")
GFD = {"nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/gpu.memory": "143771",
       "nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "mixed",
       "nvidia.com/gpu.sharing-strategy": "none"}


@pytest.fixture
def nfd_expect(tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "cluster.yaml"
    path.write_text(textwrap.dedent(NFD_CLUSTER))
    cluster = load_cluster(path)
    return from_node(cluster.node("gpu-1"), True, cluster.kubernetes.dra,
                     cluster.kubernetes.node_feature_discovery).to_dict()


def test_under_dra_with_nfd_gfd_labels_are_expected(nfd_expect: dict[str, Any]) -> None:
    labels = nfd_expect["kubernetes"]["labels"]
    assert labels["exact"]["nvidia.com/mig.capable"] == "true" and "NVIDIA-H200" in labels["products"]
    assert nfd_expect["kubernetes"]["devices"] == {"gpu": 1, "mig-1g.18gb": 7}


def test_the_agent_reads_the_node_for_labels_beside_its_slices(monkeypatch: pytest.MonkeyPatch,
                                                                sample: dict[str, Any],
                                                                nfd_expect: dict[str, Any]) -> None:
    """Under DRA the allocatable check judges the slices and the labels check the Node, each its own reading."""
    from gpu_provision.node.verify import node_readings, runtime

    monkeypatch.setattr(slices, "read_settled", lambda spec: (sample, None))
    monkeypatch.setattr(runtime, "read_node", lambda spec: ({"metadata": {"name": "gpu-1", "labels": GFD}}, None))
    readings = node_readings.NodeReadings(nfd_expect, None)
    rows = {r.id: r for r in registry.CHECKS}
    alloc = rows["node.kubernetes.allocatable"].check(readings.node_object, nfd_expect)
    labelled = rows["node.kubernetes.labels"]
    assert labelled.needs == ("labelled_node",)
    label_check = labelled.check(readings.labelled_node, nfd_expect)
    assert alloc.status == "pass" and label_check.status == "pass", label_check.reason
    wrong = dict(GFD, **{"nvidia.com/mig.capable": "false"})
    monkeypatch.setattr(runtime, "read_node", lambda spec: ({"metadata": {"labels": wrong}}, None))
    failed = labelled.check(node_readings.NodeReadings(nfd_expect, None).labelled_node, nfd_expect)
    assert failed.status == "fail" and "mig.capable" in failed.reason


def test_without_nfd_the_dra_labels_check_skips(monkeypatch: pytest.MonkeyPatch, sample: dict[str, Any],
                                                expect: dict[str, Any]) -> None:
    from gpu_provision.node.verify import node_readings

    monkeypatch.setattr(slices, "read_settled", lambda spec: (sample, None))
    readings = node_readings.NodeReadings(expect, None)
    row = next(r for r in registry.CHECKS if r.id == "node.kubernetes.labels")
    assert readings.labels_job is None and row.check(readings.labelled_node, expect).status == "skip"
