"""node.kubernetes.labels: GPU Feature Discovery's labels against the file, expected only where NFD runs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gpu_provision.node.verify.labels import labels_check
from gpu_provision.spec import load_cluster
from gpu_provision.verify.expect import from_node, gfd_labels

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = load_cluster(ROOT / "inventory" / "cluster.yaml")


def _node(labels: dict[str, str]) -> dict:
    return {"metadata": {"labels": labels}}


def test_expectations_carry_the_labels_only_with_nfd() -> None:
    h200 = CLUSTER.node("h200-01")
    assert from_node(h200, True).to_dict()["kubernetes"]["labels"] == {}
    want = from_node(h200, True, feature_labels=True).to_dict()["kubernetes"]["labels"]
    assert want["exact"] == {"nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "mixed",
                             "nvidia.com/gpu.sharing-strategy": "none"}
    assert "NVIDIA-H200" in want["products"] and want["memory_mib"] == 141 * 1024


def test_labels_as_gfd_writes_them_pass_and_a_wrong_strategy_fails() -> None:
    h200 = CLUSTER.node("h200-01")
    expect = {"kubernetes": {"labels": gfd_labels(h200)}}
    good = {"nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/gpu.memory": "143771",
            "nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "mixed",
            "nvidia.com/gpu.sharing-strategy": "none"}
    assert labels_check(_node(good), None, expect).status == "pass"
    bad = dict(good, **{"nvidia.com/mig.strategy": "single", "nvidia.com/gpu.memory": "40960"})
    check = labels_check(_node(bad), None, expect)
    assert check.status == "fail" and "mig.strategy" in check.reason and "gpu.memory" in check.reason


def test_shared_and_single_strategy_forms() -> None:
    h200 = CLUSTER.node("h200-01")
    single = replace(h200, device_plugin=replace(h200.device_plugin, mig_strategy="single"))
    want = gfd_labels(single)
    assert "memory_mib" not in want
    labels = {"nvidia.com/gpu.product": "NVIDIA-H200-MIG-1g.18gb", "nvidia.com/mig.capable": "true",
              "nvidia.com/mig.strategy": "single", "nvidia.com/gpu.sharing-strategy": "none"}
    assert labels_check(_node(labels), None, {"kubernetes": {"labels": want}}).status == "pass"


def test_skipped_without_expected_labels_and_failed_on_a_read_error() -> None:
    assert labels_check(_node({}), None, {"kubernetes": {}}).status == "skip"
    want = {"kubernetes": {"labels": gfd_labels(CLUSTER.node("h200-01"))}}
    assert labels_check(None, "kubectl get node: forbidden", want).status == "fail"
