"""``verify --workload``: what each node's pods ask for, the manifests, the judging of real probe lines, and a run
through kubectl with the API's answers scripted.

The probe lines judged here came from the workload's own program on a real H200
(``tests/fixtures/device/h200-workload``); the rig test (``tests/rig/test_kubernetes_workload.py``) runs the whole
command against the rig's stand-in API.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from gpu_provision.errors import GpuProvisionError
from gpu_provision.spec import load_cluster
from gpu_provision.spec.defaults import KUBERNETES_MINORS
from gpu_provision.verify import workload
from gpu_provision.verify.report import fleet_status, schema_problems

ROOT = Path(__file__).resolve().parents[2]
DEVICE = ROOT / "tests" / "fixtures" / "device" / "h200-workload"
EXAMPLE = ROOT / "inventory" / "cluster.yaml"


@pytest.fixture(scope="module")
def example():
    return load_cluster(EXAMPLE)


def _line(name: str) -> dict[str, Any]:
    lines = workload.probe_lines((DEVICE / name).read_text())
    assert len(lines) == 1
    return lines[0]


def _pod(name: str, node: str | None, owner: str, phase: str = "Running", **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {workload.NODE_LABEL: owner}},
            "spec": {"nodeName": node} if node else {}, "status": {"phase": phase, **status}}


def test_each_node_asks_as_its_allocation_serves(example):
    asks = {a.node: a for a in workload.plan(example)}
    # Seven MIG GPUs (mixed) and one whole one: the whole GPU; single strategy: one MIG device as nvidia.com/gpu;
    # time-sliced: one replica; plain GPUs: all of them.
    assert asks["h200-01"] == workload.Ask("h200-01", 1, resource="nvidia.com/gpu")
    assert asks["a100-01"] == workload.Ask("a100-01", 1, resource="nvidia.com/gpu")
    assert asks["l40s-01"] == workload.Ask("l40s-01", 1, resource="nvidia.com/gpu")
    assert asks["vgpu-01"] == workload.Ask("vgpu-01", 2, resource="nvidia.com/gpu")
    assert workload.plan(example, gpus=1)[-1].count == 1
    assert [a.node for a in workload.plan(example, limit=["l40s-01"])] == ["l40s-01"]

    dra = replace(example, kubernetes=replace(example.kubernetes, gpu_allocation="dra"))
    asks = {a.node: a for a in workload.plan(dra)}
    assert asks["h200-01"] == workload.Ask("h200-01", 1, device_class="gpu.nvidia.com")
    assert asks["a100-01"] == workload.Ask("a100-01", 1, device_class="mig-1g-10gb.gpu.nvidia.com")
    assert asks["l40s-01"].count == 4


def test_workload_needs_kubernetes_in_the_file(example):
    off = replace(example, kubernetes=replace(example.kubernetes, enabled=False))
    with pytest.raises(GpuProvisionError, match="needs cluster.kubernetes.enabled: true"):
        workload.plan(off)


@pytest.mark.parametrize("allocation", ["device-plugin", "dra"])
def test_manifests_are_valid_for_every_supported_minor(example, allocation):
    cluster = replace(example, kubernetes=replace(example.kubernetes, gpu_allocation=allocation))
    objects = workload.run(cluster, "gpu-provision", None, shm="8Gi", replicas=2, manifest_only=True)
    kinds = [o["kind"] for o in objects]
    assert kinds[0] == "Namespace"
    assert kinds.count("Deployment") == 4
    assert kinds.count("ResourceClaimTemplate") == (4 if allocation == "dra" else 0)
    for minor in KUBERNETES_MINORS:
        for obj in objects:
            kubernetes_validate.validate(obj, f"{minor}.0", strict=True)
    deployment = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("vgpu-01"))
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "vgpu-01"}
    assert pod["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}]
    container = pod["containers"][0]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    # The memory-backed /dev/shm counts against the container's memory: the limit holds it and the probe.
    assert container["resources"]["limits"]["memory"] == f"{8 * 1024 + workload.PROBE_MEMORY_MIB}Mi"
    if allocation == "dra":
        assert pod["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": "gpu-provision-workload-vgpu-01"}]
        assert container["resources"]["claims"] == [{"name": "gpus"}]
        assert not [k for k in container["resources"]["limits"] if k.startswith("nvidia.com/")]
    else:
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 2
        assert "resourceClaims" not in pod


def test_bad_sizes_are_refused_with_what_is_allowed():
    assert workload.quantity_bytes("1Gi") == 1 << 30
    assert workload.quantity_bytes("512Mi") == 512 << 20
    assert workload.quantity_bytes("2G") == 2 * 10 ** 9
    for text in ("1.5Gi", "0", "-1Gi", "lots", "1GB"):
        with pytest.raises(ValueError, match="Ki, Mi, Gi, Ti"):
            workload.quantity_bytes(text)


def test_the_cli_refuses_a_bad_size_without_a_traceback():
    done = subprocess.run([sys.executable, "-m", "gpu_provision.cli", "verify", "--cluster", str(EXAMPLE),
                           "--workload", "--shm-size", "lots", "--manifest"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    assert "--shm-size" in done.stderr and "Ki, Mi, Gi, Ti" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_h200s_probe_lines_pass():
    ask = workload.Ask("h200-device", 1, resource="nvidia.com/gpu")
    lines = {line["pod"]: line for line in (_line("replica-1.log"), _line("replica-2.log"))}
    pods = [_pod(name, "h200-device", workload.object_name("h200-device")) for name in lines]
    report = workload.judge(ask, 2, 1 << 30, pods, lines, "2026-12-04T18:16:00.000Z", 3.1)
    assert schema_problems(report) == []
    assert report["status"] == "pass", report
    by_id = {c["id"]: c for c in report["checks"]}
    assert by_id["workload.cuda.vector_add"]["measured"] == {"replicas": 2, "devices": [1, 1]}
    assert by_id["workload.shm.size"]["measured"]["fs"] == ["tmpfs"]


def test_a_pod_without_its_gpu_fails_with_cudas_own_words():
    ask = workload.Ask("h200-device", 1, resource="nvidia.com/gpu")
    line = _line("replica-nogpu.log")
    report = workload.judge(ask, 1, 1 << 30, [_pod("no-gpu", "h200-device", "x")], {"no-gpu": line},
                            "2026-12-04T18:16:00.000Z", 1.0)
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    assert [c["id"] for c in failed] == ["workload.cuda.vector_add"]
    assert failed[0]["reason"] == "in pod no-gpu: CUDA initialization failed: cuInit failed: CUDA_ERROR_NO_DEVICE (100)"
    assert fleet_status([report]) == 1


def test_too_few_devices_or_too_small_shm_fail():
    ask = workload.Ask("h200-device", 2, resource="nvidia.com/gpu")
    line = _line("replica-1.log")
    report = workload.judge(ask, 1, 256 << 30, [_pod(line["pod"], "h200-device", "x")], {line["pod"]: line},
                            "2026-12-04T18:16:00.000Z", 1.0)
    reasons = {c["id"]: c["reason"] for c in report["checks"] if c["status"] == "fail"}
    assert reasons["workload.cuda.vector_add"] == (f"pod {line['pod']} saw 1 CUDA device(s), asked for "
                                                   "2 nvidia.com/gpu")
    assert reasons["workload.shm.size"].endswith(f"holds 137438953472 bytes, below the {256 << 30} asked for")


def test_an_unschedulable_pod_reports_the_schedulers_message():
    message = ("0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node "
               "affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.")
    pending = _pod("w-1", None, "x", "Pending", conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}])
    report = workload.judge(workload.Ask("gpu-a", 8, resource="nvidia.com/gpu"), 1, 1 << 30, [pending], {},
                            "2026-12-04T18:16:00.000Z", 300.0)
    assert schema_problems(report) == []
    by_id = {c["id"]: c for c in report["checks"]}
    assert by_id["workload.pods.scheduled"]["status"] == "fail"
    assert by_id["workload.pods.scheduled"]["reason"] == f"not scheduled: {message}"
    assert by_id["workload.pods.running"]["reason"] == f"not scheduled: {message}"
    # Nothing ran, so the CUDA and /dev/shm checks are skipped rather than failed twice more.
    assert [by_id[i]["status"] for i in ("workload.cuda.vector_add", "workload.shm.size")] == ["skip", "skip"]


def test_a_waiting_container_reports_its_reason():
    waiting = _pod("w-1", "gpu-a", "x", "Pending", containerStatuses=[{"name": "cuda", "state": {"waiting": {
        "reason": "ImagePullBackOff", "message": 'Back-off pulling image "python:3.12-slim"'}}}])
    assert workload.pod_problem(waiting) == 'ImagePullBackOff: Back-off pulling image "python:3.12-slim"'


class FakeKubectl:
    """kubectl answering from a script: pods appear pending, then run and print the H200's line."""

    def __init__(self, node: str, line: dict[str, Any]):
        self.calls: list[tuple[str, ...]] = []
        self.node, self.line, self.rounds = node, line, 0
        self.applied: list[dict[str, Any]] = []
        self.deleted: list[dict[str, Any]] = []

    def __call__(self, kubeconfig: str | None, *args: str) -> str:
        self.calls.append(args)
        if args[0] in ("apply", "delete"):
            items = json.loads(Path(args[args.index("-f") + 1]).read_text())["items"]
            (self.applied if args[0] == "apply" else self.deleted).extend(items)
            return ""
        owner = workload.object_name(self.node)
        if args[:2] == ("get", "pods"):
            self.rounds += 1
            phase = "Running" if self.rounds > 1 else "Pending"
            return json.dumps({"items": [_pod("w-abc12", self.node, owner, phase)]})
        if args[0] == "logs":
            return "some image banner\n" + json.dumps(dict(self.line, pod="w-abc12")) + "\n"
        raise AssertionError(args)


def test_a_run_applies_waits_judges_and_deletes_what_it_made(monkeypatch, example):
    fake = FakeKubectl("l40s-01", _line("replica-1.log"))
    monkeypatch.setattr(workload, "kubectl", fake)
    asks = workload.plan(example, limit=["l40s-01"])
    objects = workload.manifests(asks, "gpu-provision", "python:3.12-slim", [])
    slept: list[float] = []
    reports = workload.Run(asks, "gpu-provision", "/k.conf", sleep=slept.append).execute(objects, lambda *_: None)
    assert [r["node"] for r in reports] == ["l40s-01"]
    assert reports[0]["status"] == "pass", reports[0]
    assert slept == [2.0]  # one round pending, then the line
    assert [o["kind"] for o in fake.applied] == ["Namespace", "Deployment"]
    # The namespace is the project's own: never deleted.
    assert [o["kind"] for o in fake.deleted] == ["Deployment"]
    assert fake.calls[-1][0] == "delete"


def test_a_run_that_times_out_still_deletes_and_says_what_is_missing(monkeypatch, example):
    fake = FakeKubectl("l40s-01", _line("replica-1.log"))
    monkeypatch.setattr(fake, "rounds", -10 ** 6)  # never running
    monkeypatch.setattr(workload, "kubectl", fake)
    asks = workload.plan(example, limit=["l40s-01"])
    objects = workload.manifests(asks, "gpu-provision", "python:3.12-slim", [])
    ticks = iter(range(0, 10 ** 6, 100))
    run = workload.Run(asks, "gpu-provision", None, timeout_s=300, clock=lambda: float(next(ticks)),
                       sleep=lambda _: None)
    reports = run.execute(objects, lambda *_: None)
    by_id = {c["id"]: c for c in reports[0]["checks"]}
    assert by_id["workload.pods.running"]["status"] == "fail"
    assert by_id["workload.pods.running"]["reason"] == "pod Pending"
    assert [o["kind"] for o in fake.deleted] == ["Deployment"]


def test_an_apply_refused_half_way_still_deletes_what_it_made(monkeypatch, example):
    fake = FakeKubectl("l40s-01", _line("replica-1.log"))

    def refusing(kubeconfig: str | None, *args: str) -> str:
        fake(kubeconfig, *args)
        if args[0] == "apply":
            raise GpuProvisionError("kubectl apply -f x: the Deployment was refused")
        return ""

    monkeypatch.setattr(workload, "kubectl", refusing)
    asks = workload.plan(example, limit=["l40s-01"])
    objects = workload.manifests(asks, "gpu-provision", "python:3.12-slim", [])
    with pytest.raises(GpuProvisionError, match="refused"):
        workload.Run(asks, "gpu-provision", None).execute(objects, lambda *_: None)
    assert [o["kind"] for o in fake.deleted] == ["Deployment"]


def test_a_failed_cleanup_does_not_hide_the_first_failure(monkeypatch, example):
    def refusing(kubeconfig: str | None, *args: str) -> str:
        raise GpuProvisionError(f"kubectl {args[0]}: the server is gone")

    monkeypatch.setattr(workload, "kubectl", refusing)
    asks = workload.plan(example, limit=["l40s-01"])
    objects = workload.manifests(asks, "gpu-provision", "python:3.12-slim", [])
    with pytest.raises(GpuProvisionError, match="kubectl apply: the server is gone"):
        workload.Run(asks, "gpu-provision", None).execute(objects, lambda *_: None)


def test_a_failed_cleanup_after_a_run_is_a_warning_naming_what_to_delete(monkeypatch, example, capsys):
    fake = FakeKubectl("l40s-01", _line("replica-1.log"))

    def no_delete(kubeconfig: str | None, *args: str) -> str:
        if args[0] == "delete":
            raise GpuProvisionError("kubectl delete: timed out")
        return fake(kubeconfig, *args)

    monkeypatch.setattr(workload, "kubectl", no_delete)
    asks = workload.plan(example, limit=["l40s-01"])
    objects = workload.manifests(asks, "gpu-provision", "python:3.12-slim", [])
    reports = workload.Run(asks, "gpu-provision", None, sleep=lambda _: None).execute(objects, lambda *_: None)
    assert reports[0]["status"] == "pass"
    assert "kubectl delete deployments,resourceclaimtemplates -n gpu-provision -l app.kubernetes.io/name=" \
           "gpu-provision-workload" in capsys.readouterr().err
