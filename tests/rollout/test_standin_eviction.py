"""The stand-in Kubernetes API and kubectl as the rollout uses them, run here on loopback (no rig): cordon and
uncordon, merge patches of labels and annotations, pods that hold a GPU run by the kubelet stand-in, the Eviction
subresource honouring PodDisruptionBudgets (429 when disallowed), drain's refusals and retries, and the rollout's
own kubectl client (:class:`gpu_provision.rollout.kubectl.KubectlApi`) against all of it.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from standin_harness import kubelet, run_kubectl, standin_api

from gpu_provision.rollout.kubectl import KubectlApi
from gpu_provision.rollout.progress import NodeProgress


def pod(name: str, node: str, labels: dict[str, str], namespace: str = "serving", owner: str | None = "ReplicaSet",
        gpu: bool = True, ready: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True}]
    resources = {"limits": {"nvidia.com/gpu": "1"}} if gpu else {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": node, "containers": [{"name": "main", "resources": resources}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": str(ready)}]}}


def pdb(name: str, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "serving"},
            "spec": {"selector": {"matchLabels": labels}, **spec}}


def names(server: str, kind: str = "Pod") -> set[str]:
    return {i["metadata"]["name"] for i in standin_api.objects(server) if i["kind"] == kind}


def test_cordon_uncordon_and_state_patches_keep_each_others_fields(server):
    api = KubectlApi(run_kubectl)
    assert api.cordon("gpu-01") is False
    assert api.cordon("gpu-01") is True  # already cordoned: reported so
    assert run_kubectl(["cordon", "gpu-01"])[1] == "node/gpu-01 already cordoned\n"
    api.record("gpu-01", NodeProgress("wait-for-jobs-required", "waiting for 1 job", "2026-12-01T08:00:00Z"))
    # The kubelet's status update goes through the status subresource: labels and the cordon stay.
    standin_api.put_status(server, {"kind": "Node", "metadata": {"name": "gpu-01"}, "status": {"phase": "x"}})
    node = api.node("gpu-01")
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["labels"]["gpu-provision.io/rollout-state"] == "wait-for-jobs-required"
    assert api.recorded("gpu-01") == NodeProgress("wait-for-jobs-required", "waiting for 1 job", "2026-12-01T08:00:00Z")
    api.record("gpu-01", NodeProgress("upgrade-done"))
    api.uncordon("gpu-01")
    node = api.node("gpu-01")
    assert "unschedulable" not in node["spec"]
    assert "gpu-provision.io/rollout-reason" not in node["metadata"].get("annotations", {})
    assert run_kubectl(["uncordon", "gpu-01"])[1] == "node/gpu-01 already uncordoned\n"


def test_pods_are_listed_per_node_by_field_selector(server):
    standin_api.put(server, pod("a", "gpu-01", {"app": "x"}))
    standin_api.put(server, pod("b", "gpu-02", {"app": "x"}))
    assert [p["metadata"]["name"] for p in KubectlApi(run_kubectl).pods("gpu-01")] == ["a"]
    rc, out, _ = run_kubectl(["get", "pods", "-A", "--field-selector", "spec.nodeName!=gpu-01", "-o", "name"])
    assert (rc, out) == (0, "pod/b\n")


def test_eviction_honours_a_disruption_budget_with_429(server):
    for i, node in enumerate(("gpu-01", "gpu-02")):
        standin_api.put(server, pod(f"serve-{i}", node, {"app": "serve"}))
    standin_api.put(server, pdb("serve", {"app": "serve"}, minAvailable=1))
    api = KubectlApi(run_kubectl)
    assert api.evict(standin_api.find(standin_api.objects(server), "Pod", "serve-0", "serving")) is None
    # serve-0 is terminating (its kubelet stops it): one healthy pod left, the budget needs one.
    assert standin_api.find(standin_api.objects(server), "Pod", "serve-0", "serving")["metadata"]["deletionTimestamp"]
    blocked = api.evict(standin_api.find(standin_api.objects(server), "Pod", "serve-1", "serving"))
    assert blocked is not None and "Cannot evict pod as it would violate the pod's disruption budget" in blocked
    rc, _, err = run_kubectl(["create", "--raw", "/api/v1/namespaces/serving/pods/serve-1/eviction", "-f", "-"],
                             json.dumps({"apiVersion": "policy/v1", "kind": "Eviction",
                                         "metadata": {"name": "serve-1", "namespace": "serving"}}))
    assert rc == 1 and err.startswith("Error from server (TooManyRequests): Cannot evict pod")
    # A pod that is gone is not an error for the rollout (the API answers 404).
    assert api.evict({"metadata": {"name": "nope", "namespace": "serving"}}) is None


@pytest.mark.parametrize(("spec", "allowed"), [({"maxUnavailable": 1}, True), ({"maxUnavailable": 0}, False),
                                               ({"minAvailable": "50%"}, True), ({"minAvailable": "100%"}, False)])
def test_budget_forms(server, spec, allowed):
    for i in range(2):
        standin_api.put(server, pod(f"s{i}", "gpu-01", {"app": "s"}))
    standin_api.put(server, pdb("s", {"app": "s"}, **spec))
    code, status = standin_api.eviction(standin_api.objects(server), "serving", "s0")
    assert (code == 201) is allowed, status


def test_two_budgets_for_one_pod_are_an_error_and_unready_pods_can_go(server):
    standin_api.put(server, pod("s0", "gpu-01", {"app": "s", "tier": "a"}))
    standin_api.put(server, pod("s1", "gpu-01", {"app": "s"}, ready=False))
    standin_api.put(server, pdb("one", {"app": "s"}, minAvailable=1))
    # s1 is not ready: it may go while the budget keeps its one healthy pod.
    assert standin_api.eviction(standin_api.objects(server), "serving", "s1")[0] == 201
    assert standin_api.eviction(standin_api.objects(server), "serving", "s0")[0] == 429
    standin_api.put(server, pdb("two", {"tier": "a"}, minAvailable=0))
    assert standin_api.eviction(standin_api.objects(server), "serving", "s0")[0] == 500


def test_drain_refuses_bare_and_daemonset_pods_as_kubectl_does(server):
    standin_api.put(server, pod("bare", "gpu-01", {"app": "b"}, owner=None))
    standin_api.put(server, pod("plugin", "gpu-01", {"app": "p"}, owner="DaemonSet", gpu=False))
    rc, _, err = run_kubectl(["drain", "gpu-01"])
    assert rc == 1
    assert "cannot delete Pods that declare no controller (use --force to override): serving/bare" in err
    assert "cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore): serving/plugin" in err
    assert names(server) == {"bare", "plugin"}
    rc, out, err = run_kubectl(["drain", "gpu-01", "--ignore-daemonsets", "--force", "--timeout=5s"], None)
    # No kubelet runs here to stop the marked pod: the drain waits for it and gives up at its timeout.
    assert rc == 1 and "global timeout reached" in err
    assert "evicting pod serving/bare" in out


def test_drain_retries_while_a_budget_refuses_then_gives_up_at_its_timeout(server):
    standin_api.put(server, pod("guarded", "gpu-01", {"app": "g"}))
    standin_api.put(server, pdb("g", {"app": "g"}, minAvailable=1))
    rc, _, err = run_kubectl(["drain", "gpu-01", "--ignore-daemonsets", "--timeout=1s"])
    assert rc == 1
    assert 'error when evicting pods/"guarded" -n "serving" (will retry after' in err
    assert "global timeout reached: 1s" in err
    assert KubectlApi(run_kubectl).drain("gpu-01", 1, False, False) is not None


def test_the_kubelet_runs_a_gpu_job_until_it_ends_and_stops_an_evicted_one(server, monkeypatch):
    monkeypatch.setattr(kubelet.shutil, "which", lambda name: None)  # no GPU simulator here: a plain sleep
    job = pod("job", "gpu-01", {"app": "train"}, owner="Job", namespace="default")
    job["metadata"]["annotations"] = {kubelet.RUNS_FOR: "1"}
    del job["status"]
    standin_api.put(server, job)
    long = pod("long", "gpu-01", {"app": "train"}, owner="Job", namespace="default")
    del long["status"]
    standin_api.put(server, long)

    def sync() -> dict[str, Any]:
        kubelet.run_pods(server, "gpu-01", standin_api.objects(server))
        return {i["metadata"]["name"]: i for i in standin_api.objects(server) if i["kind"] == "Pod"}

    pods = sync()
    assert pods["job"]["status"]["phase"] == pods["long"]["status"]["phase"] == "Running"
    deadline = time.monotonic() + 20
    while sync()["job"]["status"]["phase"] == "Running" and time.monotonic() < deadline:
        time.sleep(0.2)
    pods = sync()
    assert pods["job"]["status"]["phase"] == "Succeeded"
    assert pods["job"]["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    api = KubectlApi(run_kubectl)
    assert api.evict(pods["long"]) is None
    process = kubelet.PROCS[pods["long"]["metadata"]["uid"]]
    pods = sync()
    assert "long" not in pods and process.poll() is not None  # stopped, then removed
    assert [p["metadata"]["name"] for p in api.pods("gpu-01")] == ["job"]
