"""The stand-in API's controllers and scheduler, the kubelet running a pod's own command and serving its log, and
``verify --workload`` driven through all of it on loopback (no rig).

What the scheduler says is kube-scheduler's wording for the same cases (see ``standin_api``'s docstring); the rig
test (``tests/rig/test_kubernetes.py``) runs the same command over the rig's network.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from standin_harness import (
    GPU_TAINT,
    in_process_kubectl,
    kinds,
    kubelet,
    node,
    reconcile,
    run_kubectl,
    standin_api,
)

from gpu_provision.verify import workload


def deployment(name: str, replicas: int, gpus: int, node_name: str, tolerate: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeSelector": {"kubernetes.io/hostname": node_name},
                            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
    if tolerate:
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


def test_a_deployment_gets_a_replicaset_and_pods_bound_where_they_fit():
    items = [node("cp", taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]),
             node("gpu-a", gpus=2, taints=[GPU_TAINT]), node("gpu-b", gpus=8), deployment("train", 2, 1, "gpu-a")]
    reconcile(items)
    [rs] = kinds(items, "ReplicaSet")
    pod_hash = rs["metadata"]["labels"]["pod-template-hash"]
    assert rs["metadata"]["name"] == f"train-{pod_hash}" and len(pod_hash) == 10
    assert set(pod_hash) <= set(standin_api.SAFE)
    assert rs["metadata"]["ownerReferences"][0]["uid"] == "uid-train"
    pods = kinds(items, "Pod")
    assert len(pods) == 2
    for pod in pods:
        assert pod["metadata"]["name"].startswith(f"train-{pod_hash}-") and len(pod["metadata"]["name"]) == 22
        assert pod["spec"]["nodeName"] == "gpu-a"
        assert pod["status"]["conditions"] == [{"type": "PodScheduled", "status": "True"}]
    assert kinds(items, "Deployment")[0]["status"]["replicas"] == 2


def test_a_pod_that_fits_nowhere_says_why_in_the_schedulers_words():
    items = [node("cp", taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]),
             node("gpu-a", gpus=2, taints=[GPU_TAINT]), node("gpu-b", gpus=8), deployment("train", 3, 1, "gpu-a")]
    reconcile(items)
    pending = [p for p in kinds(items, "Pod") if not p["spec"].get("nodeName")]
    assert len(pending) == 1  # two GPUs, three pods of one each
    [condition] = pending[0]["status"]["conditions"]
    assert condition["reason"] == "Unschedulable"
    assert condition["message"] == (
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node "
        "affinity/selector, 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }. "
        "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.")
    untolerating = [node("gpu-a", gpus=2, taints=[GPU_TAINT]), deployment("x", 1, 1, "gpu-a", tolerate=False)]
    reconcile(untolerating)
    assert "1 node(s) had untolerated taint {nvidia.com/gpu: present}" in \
        kinds(untolerating, "Pod")[0]["status"]["conditions"][0]["message"]
    cordoned = node("gpu-a", gpus=2)
    cordoned["spec"]["unschedulable"] = True
    items = [cordoned, deployment("y", 1, 1, "gpu-a")]
    reconcile(items)
    assert "1 node(s) were unschedulable" in kinds(items, "Pod")[0]["status"]["conditions"][0]["message"]


def test_a_deleted_deployment_takes_its_replicaset_and_pods_but_not_other_owners_pods():
    stray = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "job-pod", "namespace": "default", "uid": "p1",
                          "ownerReferences": [{"kind": "Job", "name": "j", "uid": "0", "controller": True}]},
             "spec": {"nodeName": "gpu-b", "containers": [{"name": "main"}]}, "status": {"phase": "Running"}}
    serving = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "serve", "namespace": "default", "uid": "p2",
                            "ownerReferences": [{"kind": "ReplicaSet", "name": "r", "uid": "0", "controller": True}]},
               "spec": {"nodeName": "gpu-b", "containers": [{"name": "main"}]}, "status": {"phase": "Running"}}
    items = [node("gpu-b", gpus=8), deployment("train", 1, 1, "gpu-b"), stray, serving]
    reconcile(items)
    assert len(kinds(items, "Pod")) == 3
    items.remove(kinds(items, "Deployment")[0])
    reconcile(items)
    assert kinds(items, "ReplicaSet") == []
    # The Deployment's pod was Pending (never started): removed. Hand-made pods naming owners that do not exist (a
    # Job, a ReplicaSet the stand-in did not make) stay, as the rollout tests' serving pods must.
    assert [p["metadata"]["name"] for p in kinds(items, "Pod")] == ["job-pod", "serve"]
    assert not [p for p in kinds(items, "Pod") if p["metadata"].get("deletionTimestamp")]


def test_a_changed_template_scales_the_old_replicaset_to_zero():
    items = [node("gpu-b", gpus=8), deployment("train", 1, 1, "gpu-b")]
    reconcile(items)
    kinds(items, "Deployment")[0]["spec"]["template"]["metadata"]["labels"]["v"] = "2"
    reconcile(items)
    replicas = sorted(rs["spec"]["replicas"] for rs in kinds(items, "ReplicaSet"))
    assert replicas == [0, 1]


def test_the_kubelet_runs_a_pods_own_command_with_its_environment():
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
           "spec": {"nodeName": "gpu-b", "containers": [{
               "name": "main", "command": ["python3", "-c"], "args": ["print(1)"],
               "env": [{"name": "A", "value": "1"},
                       {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                       {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}]}}
    argv, env = kubelet.container_command(pod)
    assert argv == ["python3", "-c", "print(1)"]
    assert env == {"A": "1", "NODE_NAME": "gpu-b", "POD_NAME": "p"}
    pod["spec"]["containers"][0]["command"] = ["/no/such/program"]
    assert kubelet.container_command(pod) == (None, {})


def test_verify_workload_through_the_stand_in_api(cluster, monkeypatch: pytest.MonkeyPatch):
    """The command's own run: apply, the controllers make the pod, the scheduler binds it past the GPU taint, the
    kubelet runs the probe (here, with no libcuda, CUDA's loader error), the log comes through the API, and what
    the run made is deleted."""
    monkeypatch.setattr(workload, "kubectl", in_process_kubectl)
    ask = workload.Ask("gpu-01", 2, resource="nvidia.com/gpu")
    tolerate = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    objects = workload.manifests([ask], "gpu-provision", "python:3.12-slim", tolerate, shm="1Mi")
    run = workload.Run([ask], "gpu-provision", None, shm="1Mi", timeout_s=60, interval_s=0.3)
    [report] = run.execute(objects, lambda *_: None)
    by_id = {c["id"]: c for c in report["checks"]}
    assert by_id["workload.pods.scheduled"]["status"] == "pass", report
    assert by_id["workload.pods.scheduled"]["measured"]["nodes"] == ["gpu-01"]
    assert by_id["workload.pods.running"]["status"] == "pass", report
    assert by_id["workload.cuda.vector_add"]["status"] == "fail"
    assert "libcuda.so.1 not loadable" in by_id["workload.cuda.vector_add"]["reason"]
    assert by_id["workload.shm.size"]["status"] == "pass", report
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = [o["kind"] for o in standin_api.objects(cluster) if o["kind"] in ("Deployment", "ReplicaSet", "Pod")]
        if not left:
            break
        time.sleep(0.3)
    assert left == []
    kept = {o["metadata"]["name"] for o in standin_api.objects(cluster) if o["kind"] == "Namespace"}
    assert "gpu-provision" in kept


def test_kubectl_logs_of_a_pod_not_started_says_so(cluster):
    standin_api.put(cluster, {"apiVersion": "v1", "kind": "Pod",
                              "metadata": {"name": "waiting", "namespace": "default"},
                              "spec": {"containers": [{"name": "main"}], "nodeSelector": {"nowhere": "x"}}})
    rc, _, err = run_kubectl(["logs", "waiting", "-n", "default"])
    assert rc == 1
    assert 'container "main" in pod "waiting" is waiting to start' in err
    assert "Traceback" not in err
