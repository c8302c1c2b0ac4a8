"""In-cluster verification: generated DaemonSet manifests, and collection from pod logs through kubectl.

kubectl is a stand-in here (a script answering from canned files), since no Kubernetes API server runs on the
test machine; the pod log it returns is a real report captured on an H200 machine.
"""

from __future__ import annotations

import base64
import io
import json
import os
import sys
import zipfile
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gpu_provision import bundle
from gpu_provision.cli import main
from gpu_provision.errors import GpuProvisionError
from gpu_provision.spec import load_cluster
from gpu_provision.verify import incluster
from gpu_provision.verify.expect import build_expectations
from gpu_provision.verify.report import schema_problems

ROOT = Path(__file__).resolve().parents[2]
DEVICE = ROOT / "tests" / "fixtures" / "device"


@pytest.fixture
def expectations() -> dict[str, dict]:
    kube = {"enabled": True, "node_name": "h200-node", "allocatable": {"nvidia.com/gpu": 1}}
    return {
        "h200-node": build_expectations("h200-node", "H200", 1, driver_version="580",
                                        container={"kind": "containerd", "image": "ubuntu:24.04"},
                                        kubernetes=kube).to_dict(),
        "h200-down": build_expectations("h200-down", "H200", 8).to_dict(),
    }


def test_manifests(expectations: dict[str, dict]) -> None:
    docs = incluster.manifests(expectations, namespace="gpu-check", image="python:3.12-slim")
    assert [d["kind"] for d in docs] == ["Namespace", "ConfigMap", "ConfigMap", "DaemonSet"]
    agent_cm, expect_cm, ds = docs[1], docs[2], docs[3]
    pyz = base64.b64decode(agent_cm["binaryData"][bundle.BUNDLE_NAME])
    assert "__main__.py" in zipfile.ZipFile(io.BytesIO(pyz)).namelist() and pyz == bundle.build()
    inside = json.loads(expect_cm["data"]["h200-node.json"])
    assert inside["paths"] == {"dev": "/host/dev", "sysfs": "/host/sys"}
    assert inside["container"] == {"kind": "none"} and inside["kubernetes"]["enabled"] is False
    assert inside["kubernetes"]["allocatable"] == {"nvidia.com/gpu": 1}
    spec = ds["spec"]["template"]["spec"]
    assert spec["runtimeClassName"] == "nvidia"
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == ["h200-down", "h200-node"]
    container = spec["containers"][0]
    # Takes no GPU from workloads, and is bounded in CPU and memory.
    resources = container["resources"]
    assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in container["env"]
    assert '--expect "/opt/gpu-provision/expect/${NODE_NAME}.json"' in container["command"][2]
    assert ds["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": incluster.APP}
    # The YAML stream round-trips.
    assert list(yaml.safe_load_all(yaml.safe_dump_all(docs))) == docs


DIGEST = "sha256:" + "ab" * 32


def test_daemonset_is_hardened(expectations: dict[str, dict]) -> None:
    """No service-account token, only the GPU taint tolerated (not every taint), requests and limits."""
    ds = incluster.manifests(expectations)[3]
    spec = ds["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    container = spec["containers"][0]
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}
    assert container["securityContext"] == {"allowPrivilegeEscalation": False}
    assert all(m["readOnly"] for m in container["volumeMounts"])


@pytest.mark.parametrize("image", [f"python:3.12-slim@{DIGEST}", f"registry.internal:5000/tools/python@{DIGEST}"])
def test_image_pinned_by_digest(expectations: dict[str, dict], image: str) -> None:
    ds = incluster.manifests(expectations, image=image)[3]
    assert ds["spec"]["template"]["spec"]["containers"][0]["image"] == image
    kubernetes_validate.validate(ds, "1.31.0", strict=True)


@pytest.mark.parametrize("image", ["python@sha256:abc", "python:3.12-slim\n", "Python:3", "python@md5:" + "a" * 32])
def test_bad_image_reference_is_refused(expectations: dict[str, dict], image: str) -> None:
    with pytest.raises(GpuProvisionError, match="is not an image reference"):
        incluster.manifests(expectations, image=image)


CLUSTER = """\
version: v1
cluster:
  name: lab
  mirrors: {registry: "registry.internal:5000"}
  kubernetes:
    verification:
      image: "python:3.12-slim@DIGEST"
      tolerations: ["dedicated=gpu:NoSchedule"]
nodes:
  - {name: cp, address: 10.0.0.1, role: control-plane, taints: ["infra:NoExecute"]}
  - {name: g1, address: 10.0.0.2, gpus: {model: H200, count: 1}, taints: ["nvidia.com/gpu=present:NoExecute"]}
  - {name: g2, address: 10.0.0.3, gpus: {model: H200, count: 1}}
""".replace("DIGEST", DIGEST)


def test_pod_settings_from_the_cluster_file(tmp_path: Path, expectations: dict[str, dict]) -> None:
    """The file's image through the registry mirror; the file's tolerations plus the verified nodes' own taints."""
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    cluster = load_cluster(tmp_path / "cluster.yaml")
    settings = incluster.pod_settings(cluster, ["g1", "g2"])
    assert settings["image"] == f"registry.internal:5000/python:3.12-slim@{DIGEST}"
    assert settings["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoExecute"}]
    ds = incluster.manifests(expectations, **settings)[3]
    pod = ds["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == settings["image"] and pod["tolerations"] == settings["tolerations"]
    kubernetes_validate.validate(ds, "1.31.0", strict=True)


def test_manifest_command_uses_the_cluster_file(tmp_path: Path, monkeypatch, capsys) -> None:
    """``verify --in-cluster --manifest`` renders the file's image (through the mirror) and tolerations."""
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    monkeypatch.chdir(ROOT)
    # --cluster reaches inventory.py through the environment; monkeypatch puts the old value back afterwards.
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(tmp_path / "cluster.yaml"))
    assert main(["verify", "--cluster", str(tmp_path / "cluster.yaml"), "--in-cluster", "--manifest", "--json"]) == 0
    ds = json.loads(capsys.readouterr().out)[3]
    pod = ds["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == f"registry.internal:5000/python:3.12-slim@{DIGEST}"
    assert [t["key"] for t in pod["tolerations"]] == ["dedicated", "nvidia.com/gpu"]
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["g1", "g2"]


def test_default_pod_settings(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text(
        "version: v1\ncluster: {name: lab}\nnodes:\n  - {name: cp, address: 10.0.0.1, role: control-plane}\n")
    settings = incluster.pod_settings(load_cluster(tmp_path / "cluster.yaml"), ["cp"])
    assert settings == {"image": "python:3.12-slim", "tolerations": incluster.DEFAULT_TOLERATIONS}


def test_manifests_are_valid_kubernetes_objects(expectations: dict[str, dict]) -> None:
    """Validated offline against the Kubernetes 1.31 schemas, unknown fields rejected."""
    for doc in incluster.manifests(expectations):
        kubernetes_validate.validate(doc, "1.31.0", strict=True)


def test_pod_manifest_of_the_agent_is_valid() -> None:
    from gpu_provision.node.verify import runtime

    pod = runtime.pod_manifest({"node_name": "gpu-01", "pod_image": "python:3.12-slim"}, "nvidia.com/gpu")
    kubernetes_validate.validate(pod, "1.31.0", strict=True)


def _stand_in_kubectl(tmp_path: Path, answers: dict[str, str]) -> None:
    """A kubectl stand-in: prints the canned answer whose key is in the joined arguments, else fails."""
    (tmp_path / "answers.json").write_text(json.dumps(answers))
    script = tmp_path / "bin" / "kubectl"
    script.parent.mkdir()
    script.write_text(f"""#!{sys.executable}
import json, sys
args = " ".join(sys.argv[1:])
answers = json.load(open({str(tmp_path / "answers.json")!r}))
for key, value in answers.items():
    if key in args:
        print(value)
        sys.exit(0)
print("Error from server (NotFound): " + args, file=sys.stderr)
sys.exit(1)
""")
    script.chmod(0o755)


def test_collect_from_pod_logs(tmp_path: Path, expectations: dict[str, dict], monkeypatch) -> None:
    docs = incluster.manifests(expectations)
    report = json.loads((DEVICE / "verify-report-h200.json").read_text())
    pods = {"items": [{"metadata": {"name": "gpu-provision-verify-abcde"}, "spec": {"nodeName": "h200-node"},
                       "status": {"phase": "Running"}}]}
    node = {"status": {"allocatable": {"cpu": "16", "nvidia.com/gpu": "1"}}}
    _stand_in_kubectl(tmp_path, {
        "get pods": json.dumps(pods),
        "get configmap": json.dumps(docs[2]),
        "logs -n gpu-provision gpu-provision-verify-abcde": "starting\n" + json.dumps(report, separators=(",", ":")),
        "get node h200-node": json.dumps(node),
    })
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    collected = incluster.collect()
    assert [r["node"] for r in collected] == ["h200-down", "h200-node"]
    down, up = collected
    assert down["status"] == "error" and "no verification pod" in down["error"]
    assert up["status"] == "pass"
    alloc = next(c for c in up["checks"] if c["id"] == "node.kubernetes.allocatable")
    assert alloc["status"] == "pass" and alloc["measured"] == {"nvidia.com/gpu": 1}
    assert up["summary"]["total"] == report["summary"]["total"]  # the agent's skip was replaced, not added
    assert all(schema_problems(r) == [] for r in collected)


def test_allocatable_mismatch_fails_the_node(expectations: dict[str, dict]) -> None:
    report = json.loads((DEVICE / "verify-report-h200.json").read_text())
    node = {"status": {"allocatable": {"nvidia.com/gpu": "0"}}}
    judged = incluster.add_allocatable(report, expectations["h200-node"], node, None)
    assert judged["status"] == "fail" and judged["summary"]["fail"] == 1
    assert schema_problems(judged) == []


def test_report_from_log_ignores_other_lines() -> None:
    assert incluster.report_from_log("n", "hello\n{\"other\": 1}\n") is None


SLICES = ROOT / "tests" / "fixtures" / "dra" / "resourceslices.json"


def _dra_expectations() -> dict[str, dict]:
    """A DRA node whose ResourceSlices should list one whole GPU and seven 1g.18gb MIG devices (the sample's
    gpu-1), as ``verify.expect`` writes it for ``kubernetes.gpu_allocation: dra``."""
    kube = {"enabled": True, "node_name": "gpu-1", "allocation": "dra", "devices": {"gpu": 1, "mig-1g.18gb": 7}}
    return {"gpu-1": build_expectations("gpu-1", "H200", 2, driver_version="580", kubernetes=kube).to_dict()}


def _dra_kubectl(tmp_path: Path, monkeypatch, slices: dict) -> dict:
    docs = incluster.manifests(_dra_expectations())
    report = json.loads((DEVICE / "verify-report-h200.json").read_text())
    pods = {"items": [{"metadata": {"name": "gpu-provision-verify-fghij"}, "spec": {"nodeName": "gpu-1"},
                       "status": {"phase": "Running"}}]}
    # The device plugin does not run on a DRA node: the Node advertises no nvidia.com/* resource.
    node = {"metadata": {"name": "gpu-1"}, "status": {"allocatable": {"cpu": "16"}}}
    _stand_in_kubectl(tmp_path, {
        "get pods": json.dumps(pods),
        "get configmap": json.dumps(docs[2]),
        "logs -n gpu-provision gpu-provision-verify-fghij": json.dumps(report, separators=(",", ":")),
        "get resourceslices --field-selector spec.nodeName=gpu-1": json.dumps(slices),
        "get node gpu-1": json.dumps(node),
    })
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return report


def test_collect_judges_a_dra_node_by_its_resource_slices(tmp_path: Path, monkeypatch) -> None:
    """A DRA node passes on what its ResourceSlices list, though its Node advertises no nvidia.com/gpu."""
    report = _dra_kubectl(tmp_path, monkeypatch, json.loads(SLICES.read_text()))
    (judged,) = incluster.collect()
    alloc = next(c for c in judged["checks"] if c["id"] == "node.kubernetes.allocatable")
    assert alloc["status"] == "pass" and alloc["measured"] == {"gpu": 1, "mig-1g.18gb": 7}
    assert judged["status"] == "pass" and judged["summary"]["total"] == report["summary"]["total"]
    assert schema_problems(judged) == []


def test_collect_fails_a_dra_node_whose_slices_differ(tmp_path: Path, monkeypatch) -> None:
    slices = json.loads(SLICES.read_text())
    newest = slices["items"][1]["spec"]
    newest["devices"] = newest["devices"][:5]
    _dra_kubectl(tmp_path, monkeypatch, slices)
    (judged,) = incluster.collect()
    alloc = next(c for c in judged["checks"] if c["id"] == "node.kubernetes.allocatable")
    assert judged["status"] == "fail" and alloc["status"] == "fail"
    assert alloc["reason"] == "ResourceSlice of gpu.nvidia.com differs: gpu=0 (want 1), mig-1g.18gb=5 (want 7)"


def test_a_dra_node_without_slices_read_fails() -> None:
    report = json.loads((DEVICE / "verify-report-h200.json").read_text())
    expect = _dra_expectations()["gpu-1"]
    judged = incluster.add_allocatable(report, expect, {"status": {"allocatable": {}}}, None,
                                       (None, "kubectl get resourceslices: forbidden"))
    alloc = next(c for c in judged["checks"] if c["id"] == "node.kubernetes.allocatable")
    assert judged["status"] == "fail" and "forbidden" in alloc["reason"]


def test_a_dra_node_with_gfd_labels_is_judged_on_both() -> None:
    """Under DRA with NFD the slices decide the allocatable check and the Node's labels GFD's check."""
    from gpu_provision.node.verify.labels import ID

    report = json.loads((DEVICE / "verify-report-h200.json").read_text())
    expect = _dra_expectations()["gpu-1"]
    expect["kubernetes"]["labels"] = {"exact": {"nvidia.com/mig.capable": "true"}, "products": ["NVIDIA-H200"]}
    node = {"metadata": {"labels": {"nvidia.com/mig.capable": "true", "nvidia.com/gpu.product": "NVIDIA-H200"}}}
    judged = incluster.add_allocatable(report, expect, node, None, (json.loads(SLICES.read_text()), None))
    by_id = {c["id"]: c for c in judged["checks"]}
    assert judged["status"] == "pass" and by_id[ID]["status"] == "pass"
    node["metadata"]["labels"]["nvidia.com/mig.capable"] = "false"
    judged = incluster.add_allocatable(report, expect, node, None, (json.loads(SLICES.read_text()), None))
    assert judged["status"] == "fail" and {c["id"]: c for c in judged["checks"]}[ID]["status"] == "fail"
