"""The stand-in DRA parts (``standin_dra``): the kubelet plugin's ResourceSlice read from the simulated GPUs, the
resourceclaim controller, the scheduler's DynamicResources filter and allocation, and ``verify --workload`` in DRA
mode through the loopback API (no rig).

The slice's names, attributes and capacities are the driver's (kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1, see
``standin_dra``'s docstring); the DeviceClasses and claim templates are the project's own renderings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import simtree
from standin_harness import GPU_TAINT, in_process_kubectl, kinds, node, reconcile, standin_api, standin_dra

from gpu_provision.k8s import dra
from gpu_provision.spec import load_cluster
from gpu_provision.verify import workload

H200_GPUS = [
    {"model": "H200", "index": 0, "uuid": "GPU-d3d4d48e-bb4a-7dfe-ba8d-0c72be5897cc",
     "pci_bus_id": "00000000:00:06.0", "serial": "1653724065637"},
    {"model": "H200", "index": 1, "uuid": "GPU-c7bb669a-6c98-84b7-fff1-a0bc7cbb3d54",
     "pci_bus_id": "00000000:00:07.0", "serial": "1653724056318"},
]
DRA_CLUSTER = """\
version: v1
cluster:
  name: dra
  kubernetes: {version: "1.35.2", gpu_allocation: dra, teams: [{name: research, gpus: 1, mig: {"1g.18gb": 2}}]}
nodes:
  - {name: cp-1, address: 192.0.2.10, role: control-plane}
  - {name: gpu-01, address: 192.0.2.11, gpus: {model: H200, count: 2}}
"""
PLUGIN_LABELS = {"nvidia.com/gpu.present": "true"}


@pytest.fixture
def smi(tmp_path: Path) -> Callable[..., str]:
    """The GPU simulator's nvidia-smi on two H200s (MIG off), as ``smi(*args)`` -> stdout."""
    env = dict(os.environ, **simtree.lay_out(tmp_path))
    (tmp_path / "gpus.json").write_text(json.dumps({"gpus": H200_GPUS}))

    def run(*args: str) -> str:
        return subprocess.run([sys.executable, str(simtree.SIM), "nvidia-smi", *args], capture_output=True,
                              text=True, env=env, timeout=60).stdout

    return run


@pytest.fixture
def device_classes(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "cluster.yaml"
    path.write_text(DRA_CLUSTER)
    return dra.device_classes(load_cluster(path).kubernetes)


def test_whole_gpus_are_listed_with_the_drivers_names_attributes_and_capacity(smi):
    devices = standin_dra.read_devices(smi)
    assert [d["name"] for d in devices] == ["gpu-0", "gpu-1"]
    attributes = devices[0]["attributes"]
    assert attributes["type"] == {"string": "gpu"}
    assert attributes["uuid"] == {"string": H200_GPUS[0]["uuid"]}
    assert attributes["productName"] == {"string": "NVIDIA H200"}
    # NVML brand 14 (NVIDIA) through go-nvlib, and versions as Masterminds semver prints them.
    assert attributes["brand"] == {"string": "Nvidia"}
    assert attributes["architecture"] == {"string": "Hopper"}
    assert attributes["driverVersion"] == {"version": "580.159.4"}
    assert attributes["cudaDriverVersion"] == {"version": "13.0.0"}
    assert attributes["cudaComputeCapability"] == {"version": "9.0.0"}
    assert attributes["resource.kubernetes.io/pciBusID"] == {"string": "0000:00:06.0"}
    assert devices[0]["capacity"] == {"memory": {"value": "143771Mi"}}


def test_a_mig_gpu_is_listed_by_its_mig_devices_only(smi):
    smi("-i", "1", "-mig", "1")
    smi("mig", "-i", "1", "-cgi", "19,19,9", "-C")
    devices = {d["name"]: d for d in standin_dra.read_devices(smi)}
    assert sorted(devices) == ["gpu-0", "gpu-1-mig-1g18gb-19-5", "gpu-1-mig-1g18gb-19-6", "gpu-1-mig-3g71gb-9-0"]
    big = devices["gpu-1-mig-3g71gb-9-0"]
    assert big["attributes"]["type"] == {"string": "mig"}
    assert big["attributes"]["profile"] == {"string": "3g.71gb"}
    assert big["attributes"]["parentUUID"] == {"string": H200_GPUS[1]["uuid"]}
    assert big["attributes"]["uuid"]["string"].startswith("MIG-")
    assert {k: v["value"] for k, v in big["capacity"].items() if k.startswith("memorySlice")} == {
        f"memorySlice{i}": "1" for i in range(4)}
    assert big["capacity"]["memory"] == {"value": "71424Mi"}
    assert int(big["capacity"]["multiprocessors"]["value"]) > 0


def test_canonical_mig_names_follow_the_drivers_rule():
    assert standin_dra.canonical_mig_name(0, "1g.18gb", 19, 0) == "gpu-0-mig-1g18gb-19-0"
    assert standin_dra.canonical_mig_name(3, "1g.18gb+me", 20, 6) == "gpu-3-mig-1g18gb-me-20-6"


def _plugin() -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": standin_dra.PLUGIN[2], "namespace": standin_dra.PLUGIN[1]},
            "spec": {"template": {"spec": {"nodeSelector": dict(PLUGIN_LABELS)}}}}


def _gpu_node(server: str) -> None:
    obj = node("gpu-01", taints=[GPU_TAINT])
    obj["metadata"]["labels"].update(PLUGIN_LABELS)
    standin_api.put(server, obj)


def test_the_plugin_publishes_one_slice_per_node_updates_it_in_place_and_removes_it(server, smi):
    _gpu_node(server)
    standin_dra.publish(server, standin_api.objects(server), "gpu-01", lambda: standin_dra.read_devices(smi))
    assert kinds(standin_api.objects(server), "ResourceSlice") == [], "no plugin DaemonSet, no slice"
    standin_api.put(server, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}})
    standin_api.put(server, _plugin())
    read = lambda: standin_dra.read_devices(smi)  # noqa: E731
    standin_dra.publish(server, standin_api.objects(server), "gpu-01", read)
    [first] = kinds(standin_api.objects(server), "ResourceSlice")
    assert first["metadata"]["name"].startswith("0-gpu.nvidia.com-gpu-01-")
    assert len(first["metadata"]["name"]) == len("0-gpu.nvidia.com-gpu-01-") + 5
    assert first["metadata"]["ownerReferences"][0]["kind"] == "Node"
    assert first["spec"]["pool"] == {"name": "gpu-01", "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in first["spec"]["devices"]] == ["gpu-0", "gpu-1"]
    standin_dra.publish(server, standin_api.objects(server), "gpu-01", read)
    assert kinds(standin_api.objects(server), "ResourceSlice") == [first], "a second pass changes nothing"
    smi("-i", "1", "-mig", "1")
    smi("mig", "-i", "1", "-cgi", "19", "-C")
    standin_dra.publish(server, standin_api.objects(server), "gpu-01", read)
    [second] = kinds(standin_api.objects(server), "ResourceSlice")
    assert second["metadata"]["name"] == first["metadata"]["name"]
    assert second["spec"]["pool"]["generation"] == 1
    assert [d["name"] for d in second["spec"]["devices"]] == ["gpu-0", "gpu-1-mig-1g18gb-19-6"]
    standin_api.patch(server, "Node", "gpu-01", "", {"metadata": {"labels": {"nvidia.com/gpu.present": None}}})
    standin_dra.publish(server, standin_api.objects(server), "gpu-01", read)
    assert kinds(standin_api.objects(server), "ResourceSlice") == []


def _slice(node_name: str, devices: list[tuple[str, str, str | None]]) -> dict[str, Any]:
    out = []
    for name, kind, profile in devices:
        attributes = {"type": {"string": kind}}
        if profile:
            attributes["profile"] = {"string": profile}
        out.append({"name": name, "attributes": attributes})
    return {"apiVersion": standin_dra.API, "kind": "ResourceSlice", "metadata": {"name": f"0-gpu.nvidia.com-{node_name}-x"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node_name,
                     "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1}, "devices": out}}


def _claim_pod(name: str, template: str, node_name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node_name},
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                     "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
                     "containers": [{"name": "main", "resources": {"claims": [{"name": "gpus"}]}}]},
            "status": {"phase": "Pending"}}


def _template(name: str, device_class: str, count: int = 1) -> dict[str, Any]:
    return {"apiVersion": standin_dra.API, "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}}]}}}}


def test_claims_are_made_allocated_on_bind_and_never_share_a_device(device_classes):
    items = [*device_classes, node("gpu-01", taints=[GPU_TAINT]),
             _slice("gpu-01", [("gpu-0", "gpu", None), ("gpu-1-mig-1g18gb-19-6", "mig", "1g.18gb")]),
             _template("whole", "gpu.nvidia.com"), _template("slice", dra.profile_class("1g.18gb")),
             _claim_pod("a", "whole", "gpu-01"), _claim_pod("b", "slice", "gpu-01"), _claim_pod("c", "whole", "gpu-01")]
    reconcile(items)
    claims = {c["metadata"]["ownerReferences"][0]["name"]: c for c in kinds(items, "ResourceClaim")}
    assert sorted(claims) == ["a", "b", "c"]
    a, b = claims["a"], claims["b"]
    assert a["metadata"]["name"].startswith("a-gpus-") and len(a["metadata"]["name"]) == len("a-gpus-") + 5
    assert a["metadata"]["annotations"][standin_dra.POD_CLAIM_NAME] == "gpus"
    assert a["status"]["allocation"]["devices"]["results"] == [
        {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "gpu-01", "device": "gpu-0"}]
    assert a["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"] == [
        {"key": "metadata.name", "operator": "In", "values": ["gpu-01"]}]
    assert a["status"]["reservedFor"] == [{"resource": "pods", "name": "a", "uid": "uid-a"}]
    assert [r["device"] for r in b["status"]["allocation"]["devices"]["results"]] == ["gpu-1-mig-1g18gb-19-6"]
    pods = {p["metadata"]["name"]: p for p in kinds(items, "Pod")}
    assert pods["a"]["spec"]["nodeName"] == "gpu-01"
    assert pods["a"]["status"]["resourceClaimStatuses"] == [{"name": "gpus", "resourceClaimName": a["metadata"]["name"]}]
    # The only whole GPU is held by a's claim: c cannot have it.
    assert "nodeName" not in pods["c"]["spec"]
    [condition] = pods["c"]["status"]["conditions"]
    assert condition["reason"] == "Unschedulable"
    assert condition["message"].startswith("0/1 nodes are available: 1 cannot allocate all claims.")
    assert "allocation" not in claims["c"].get("status", {})
    assert standin_dra.pod_devices(pods["a"], items) == ["gpu-0"]
    assert standin_dra.pod_devices(pods["c"], items) is None


def test_a_finished_pod_frees_its_device_and_a_gone_pod_takes_its_claim(device_classes):
    items = [*device_classes, node("gpu-01", taints=[GPU_TAINT]), _slice("gpu-01", [("gpu-0", "gpu", None)]),
             _template("whole", "gpu.nvidia.com"), _claim_pod("a", "whole", "gpu-01"),
             _claim_pod("c", "whole", "gpu-01")]
    reconcile(items)
    pods = {p["metadata"]["name"]: p for p in kinds(items, "Pod")}
    assert "nodeName" not in pods["c"]["spec"]
    pods["a"]["status"]["phase"] = "Succeeded"
    reconcile(items)
    claims = {c["metadata"]["ownerReferences"][0]["name"]: c for c in kinds(items, "ResourceClaim")}
    assert "allocation" not in claims["a"]["status"], "reserved for nobody: deallocated"
    assert pods["c"]["spec"]["nodeName"] == "gpu-01"
    items.remove(pods["a"])
    reconcile(items)
    assert sorted(c["metadata"]["ownerReferences"][0]["name"] for c in kinds(items, "ResourceClaim")) == ["c"]


def test_a_claim_waits_for_its_template_and_a_device_class_must_select(device_classes):
    items = [*device_classes, node("gpu-01", taints=[GPU_TAINT]), _slice("gpu-01", [("gpu-0", "gpu", None)]),
             _claim_pod("a", "missing", "gpu-01"), _template("slice", dra.profile_class("1g.18gb")),
             _claim_pod("b", "slice", "gpu-01")]
    reconcile(items)
    pods = {p["metadata"]["name"]: p for p in kinds(items, "Pod")}
    assert kinds(items, "ResourceClaim")[0]["metadata"]["ownerReferences"][0]["name"] == "b"
    assert 'waiting for dynamic resource controller to create the resourceclaim "gpus"' in \
        pods["a"]["status"]["conditions"][0]["message"]
    # A whole GPU is not a 1g.18gb MIG device.
    assert "cannot allocate all claims" in pods["b"]["status"]["conditions"][0]["message"]


def test_selectors_read_the_drivers_attribute_forms():
    device = {"name": "gpu-0", "attributes": {"type": {"string": "mig"}, "profile": {"string": "1g.18gb"}}}
    cel = lambda text: [{"cel": {"expression": text}}]  # noqa: E731
    assert standin_dra.selects(cel("device.driver == 'gpu.nvidia.com' && "
                                   "device.attributes['gpu.nvidia.com'].profile == '1g.18gb'"), "gpu.nvidia.com", device)
    assert not standin_dra.selects(cel("device.attributes['gpu.nvidia.com'].type == 'gpu'"), "gpu.nvidia.com", device)
    assert not standin_dra.selects(cel("device.driver == 'other.example.com'"), "gpu.nvidia.com", device)
    assert not standin_dra.selects(cel("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('1Gi')) >= 0"),
                                   "gpu.nvidia.com", device), "an expression it cannot read selects nothing"


def test_verify_workload_in_dra_mode_through_the_stand_in_api(dra_cluster, monkeypatch: pytest.MonkeyPatch):
    """The command's own DRA run: its claim template becomes each pod's claim, the scheduler allocates one of the
    node's two GPUs per replica, the kubelet runs the probe once the claim is reserved, and what the run made
    (claims included) is gone afterwards."""
    monkeypatch.setattr(workload, "kubectl", in_process_kubectl)
    ask = workload.Ask("gpu-01", 1, device_class="gpu.nvidia.com")
    tolerate = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    objects = workload.manifests([ask], "gpu-provision", "python:3.12-slim", tolerate, replicas=2, shm="1Mi")
    run = workload.Run([ask], "gpu-provision", None, shm="1Mi", timeout_s=60, interval_s=0.3)
    [report] = run.execute(objects, lambda *_: None)
    by_id = {c["id"]: c for c in report["checks"]}
    assert by_id["workload.pods.scheduled"]["status"] == "pass", report
    assert by_id["workload.pods.running"]["status"] == "pass", report
    assert by_id["workload.shm.size"]["status"] == "pass", by_id["workload.shm.size"]
    assert by_id["workload.cuda.vector_add"]["status"] == "fail", "no libcuda here"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = sorted(o["kind"] for o in standin_api.objects(dra_cluster)
                      if o["kind"] in ("Deployment", "ReplicaSet", "Pod", "ResourceClaim", "ResourceClaimTemplate"))
        if not left:
            break
        time.sleep(0.3)
    assert left == []


@pytest.fixture
def dra_cluster(cluster: str, device_classes: list[dict[str, Any]]) -> str:
    """The loopback cluster of ``test_standin_controllers`` with the node's two GPUs in a ResourceSlice and the
    project's DeviceClasses, its control loop running every controller, the DRA ones included."""
    for obj in (*device_classes, _slice("gpu-01", [("gpu-0", "gpu", None), ("gpu-1", "gpu", None)])):
        standin_api.put(cluster, obj)
    return cluster
