"""The stand-in API serves DRA's kinds as plain stored objects, and its kubectl selects ResourceSlices by node and
driver as the real API's field selectors do (checked without starting the server)."""

from __future__ import annotations

import importlib.util
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path

import pytest

STANDINS = Path(__file__).resolve().parents[2] / "rig/gpu_provision_rig/standins/kubernetes"
sys.path.insert(0, str(STANDINS / "common"))
import standin_api  # noqa: E402


def _kubectl():
    loader = SourceFileLoader("standin_kubectl_dra", str(STANDINS / "kubectl/root/usr/bin/kubectl"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


@pytest.mark.parametrize(("name", "kind", "namespaced"), [
    ("deviceclasses", "DeviceClass", False), ("resourceslice", "ResourceSlice", False),
    ("resourceclaims.resource.k8s.io", "ResourceClaim", True),
    ("resourceclaimtemplate", "ResourceClaimTemplate", True),
])
def test_dra_kinds_resolve_under_resource_k8s_io_v1(name: str, kind: str, namespaced: bool) -> None:
    assert standin_api.resolve_kind(name) == (kind, "resource.k8s.io/v1", namespaced)
    assert standin_api.resource_name(kind, "resource.k8s.io/v1") == f"{kind.lower()}.resource.k8s.io"


def test_resourceslices_select_by_node_and_driver() -> None:
    kubectl = _kubectl()
    item = {"kind": "ResourceSlice", "metadata": {"name": "s"}, "spec": {"nodeName": "gpu-1", "driver": "gpu.nvidia.com"}}
    assert kubectl.fields_match(item, "spec.nodeName=gpu-1")
    assert kubectl.fields_match(item, "spec.nodeName=gpu-1,spec.driver=gpu.nvidia.com")
    assert not kubectl.fields_match(item, "spec.nodeName=gpu-2")
    with pytest.raises(kubectl.Usage):
        kubectl.fields_match({"kind": "ConfigMap", "metadata": {}}, "spec.driver=x")
