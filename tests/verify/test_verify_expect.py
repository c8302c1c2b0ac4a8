"""Expectations built from plain values and from the example cluster file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_provision.errors import GpuProvisionError
from gpu_provision.node.mig.model import GpuLayout, Placement
from gpu_provision.spec import load_cluster
from gpu_provision.verify.expect import (
    allocatable_for,
    build_expectations,
    from_node,
    mig_resources,
)

ROOT = Path(__file__).resolve().parents[2]


def test_model_facts_come_from_the_data_file() -> None:
    data = json.loads((ROOT / "gpu_provision" / "data" / "gpus" / "H200.json").read_text())
    expect = build_expectations("gpu-01", "H200", 8, driver_version="580", cuda_min="12.8").to_dict()
    assert expect["gpu"] == {"model": "H200", "count": 8, "product_names": data["product_names"],
                             "pci_device_ids": data["pci_device_ids"],
                             "memory_bandwidth_gbs": data["memory_bandwidth_gbs"], "mig_memory_slices": 8}
    assert expect["driver"] == {"version": "580"} and expect["cuda_min"] == "12.8"
    assert expect["bandwidth_ratio"] == 0.85 and expect["mig"] == {} and "paths" not in expect


def test_to_json_is_stable() -> None:
    one = build_expectations("a", "H200", 1, mig={0: [{"profile": "7g.141gb", "start": 0, "size": 8}]})
    two = build_expectations("a", "H200", 1, mig={0: [Placement("7g.141gb", 0, 8)]})
    assert one.to_json() == two.to_json()
    assert json.loads(one.to_json())["mig"] == {"0": [{"profile": "7g.141gb", "start": 0, "size": 8}]}


def test_mig_layouts_as_the_one_type() -> None:
    """Lists of placements or dicts become GpuLayouts in the order given; a disabled layout means MIG off."""
    placed = (Placement("3g.71gb", 4, 4), Placement("3g.71gb", 0, 4))
    expect = build_expectations("a", "H200", 2, mig={0: GpuLayout(True, placed), 1: GpuLayout(False)})
    assert expect.mig == {0: GpuLayout(True, placed)}
    assert expect.to_dict()["mig"] == {"0": [{"profile": "3g.71gb", "start": 4, "size": 4},
                                             {"profile": "3g.71gb", "start": 0, "size": 4}]}


def test_unknown_model_and_mig_on_non_mig_model() -> None:
    with pytest.raises(GpuProvisionError, match="unknown GPU model 'H300'"):
        build_expectations("a", "H300", 1)
    with pytest.raises(GpuProvisionError, match="L40S has no MIG support"):
        build_expectations("a", "L40S", 1, mig={0: [{"profile": "1g", "start": 0, "size": 1}]})


def test_device_plugin_resources() -> None:
    layouts = {0: GpuLayout(True, (Placement("3g.71gb", 0, 4), Placement("3g.71gb", 4, 4))),
               1: GpuLayout(True, (Placement("7g.141gb", 0, 8),))}
    assert mig_resources(layouts, 3) == {"nvidia.com/gpu": 1, "nvidia.com/mig-3g.71gb": 2,
                                         "nvidia.com/mig-7g.141gb": 1}
    assert mig_resources(layouts, 2, "single") == {"nvidia.com/gpu": 3}
    assert allocatable_for(4, {}, "none", replicas=4) == {"nvidia.com/gpu": 16}
    assert allocatable_for(4, {}, "none", replicas=4, renamed=True) == {"nvidia.com/gpu.shared": 16}
    assert allocatable_for(0, {}) == {}


def test_from_the_example_cluster_file() -> None:
    cluster = load_cluster(ROOT / "inventory" / "cluster.yaml")
    nodes = {n.name: n for n in cluster.nodes}
    h200 = from_node(nodes["h200-01"], True).to_dict()
    assert h200["gpu"]["count"] == 8 and h200["device_permissions"] == {"group": "gpu", "mode": "0660"}
    # GPUs 0-6 carry 1g.18gb x2 + 2g.35gb + 3g.71gb at planned placements; GPU 7 has MIG off.
    assert sorted(h200["mig"]) == [str(i) for i in range(7)]
    assert sorted(i["profile"] for i in h200["mig"]["0"]) == ["1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"]
    assert sum(i["size"] for i in h200["mig"]["0"]) == 8
    assert h200["kubernetes"]["enabled"] is True
    assert h200["kubernetes"]["allocatable"] == {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.18gb": 14,
                                                 "nvidia.com/mig-2g.35gb": 7, "nvidia.com/mig-3g.71gb": 7}
    a100 = from_node(nodes["a100-01"], True).to_dict()
    assert a100["kubernetes"]["allocatable"] == {"nvidia.com/gpu": 28}
