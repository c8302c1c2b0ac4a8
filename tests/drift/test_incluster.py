"""``gpu-provision drift --in-cluster``: the DaemonSet that probes every node and publishes the answer in its pod's
status, and the collector that reads 1,000 nodes' answers with one paged list call through the rig's stand-in
Kubernetes API server and stand-in kubectl (run here on loopback, no rig) and prints drift's own report."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import standin_apiserver
from drift_samples import IN_SYNC, write_cluster

from gpu_provision import bundle
from gpu_provision.drift import incluster
from gpu_provision.drift.report import EXIT_DRIFT, EXIT_ERROR, EXIT_IN_SYNC
from gpu_provision.drift.schema import REPORT_SCHEMA
from gpu_provision.node import publish

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "gpu-provision"


def fleet_file(path: Path, count: int, gpus: int = 0) -> Path:
    """A cluster file of ``count`` nodes (the first ``gpus`` of them with one H200), addresses unique."""
    nodes = [{"name": f"node-{i:04d}", "address": f"127.0.{1 + i // 250}.{1 + i % 250}"} for i in range(count)]
    for node in nodes[:gpus]:
        node["gpus"] = {"model": "H200", "count": 1}
    return write_cluster(path, nodes)


def pod(node: str, messages: list[str] | None, phase: str = "Running", stamp: str = "2026-12-01T08:00:00Z",
        suffix: str = "x") -> dict[str, Any]:
    """The drift pod on ``node`` as the API server holds it, its init containers terminated with ``messages``
    (None: the probe is still running)."""
    parts = incluster.part_names()
    statuses = ([{"name": name, "state": {"terminated": {"exitCode": 0, "message": message}}}
                 for name, message in zip(parts, messages)] if messages is not None else
                [{"name": parts[0], "state": {"running": {"startedAt": stamp}}}])
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"gpu-provision-drift-{node}-{suffix}", "namespace": NAMESPACE,
                         "labels": incluster.labels(incluster.COMPONENT), "creationTimestamp": stamp},
            "spec": {"nodeName": node}, "status": {"phase": phase, "initContainerStatuses": statuses}}


def published(node: str, digest: str, answer: dict[str, Any] | None = None, error: str | None = None) -> list[str]:
    """What the node's pod publishes for ``answer`` (or ``error``), through the pod's own encoder."""
    result: dict[str, Any] = {"node": node, "request": digest, "finished": "2026-12-01T08:00:01Z"}
    if error is not None:
        result["error"] = error
    else:
        result["probe"] = answer
    return publish.fitted(result)


@pytest.fixture
def in_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The stand-in API server on loopback, its kubectl first on PATH, the repository's inventory.py."""
    monkeypatch.chdir(ROOT)
    with standin_apiserver.running(tmp_path) as server:
        monkeypatch.setenv("PATH", standin_apiserver.path_with(tmp_path / "bin"))
        yield server


def test_a_thousand_nodes_are_collected_with_one_paged_list_call_and_judged_as_over_ssh(
        tmp_path, in_cluster, stages, monkeypatch) -> None:
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(fleet_file(tmp_path / "cluster.yaml", 1000)))
    targets = incluster.targets("inventory.py", stages)
    assert len(targets) == 1000 and len({t.digest for t in targets}) == 1
    digest = targets[0].digest
    drifted = copy.deepcopy(IN_SYNC)
    drifted["packages"]["packages"]["containerd"]["version"] = "1.7.0"
    pods = []
    for target in targets:
        name = target.name
        if name in ("node-0007", "node-0500"):
            continue  # no pod scheduled there
        if name == "node-0010":
            pods.append(pod(name, None, phase="Pending"))
        elif name == "node-0011":
            pods.append(pod(name, published(name, digest, error="probe exited 127: chroot: python3: not found")))
        elif name == "node-0012":
            pods.append(pod(name, published(name, "0" * 16, IN_SYNC)))
        elif name == "node-0013":
            messages = published(name, digest, IN_SYNC)
            pods.append(pod(name, [messages[0][:-5], *messages[1:]]))  # cut short
        elif name in ("node-0020", "node-0999"):
            pods.append(pod(name, published(name, digest, drifted)))
        else:
            pods.append(pod(name, published(name, digest, IN_SYNC)))
    # A restart in progress on one node: the old pod has published, the new one not yet; the answer is used.
    pods.append(pod("node-0001", None, phase="Pending", stamp="2026-12-01T09:00:00Z", suffix="new"))
    in_cluster.seed(pods)

    report = incluster.collect("inventory.py", stages, namespace=NAMESPACE, kubeconfig=str(in_cluster.kubeconfig),
                               chunk_size=300)

    lists = [p for p in in_cluster.paths if p.startswith(f"/api/v1/namespaces/{NAMESPACE}/pods?")]
    assert len(lists) == 4 == len(in_cluster.paths)  # 999 pods in pages of 300: one kubectl call, four pages
    assert all("limit=300" in p and "labelSelector=app.kubernetes.io%2Fcomponent%3Dgpu-provision-drift" in p
               for p in lists)
    assert "continue=" not in lists[0] and all("continue=" in p for p in lists[1:])
    by_name = {n.name: n for n in report.nodes}
    assert [n.name for n in report.nodes] == [t.name for t in targets]
    assert report.counts() == {"in-sync": 992, "drift": 2, "not-checked": 6, "error": 0}
    assert report.exit_status == EXIT_ERROR
    assert by_name["node-0007"].problems == [
        "no drift pod on this node (the DaemonSet is not applied, or not scheduled here)"]
    assert by_name["node-0010"].problems == [
        "pod gpu-provision-drift-node-0010-x (Pending) has not published its result yet"]
    assert by_name["node-0011"].problems == ["probe failed: probe exited 127: chroot: python3: not found"]
    assert "answered another probe request" in by_name["node-0012"].problems[0]
    assert "cannot be read" in by_name["node-0013"].problems[0]
    assert by_name["node-0001"].status == "in-sync"
    (difference,) = by_name["node-0020"].differences
    assert (difference.stage, difference.kind, difference.item, difference.expected, difference.actual) == (
        "runtime", "package", "containerd", "1.6.20~ds1-1", "1.7.0")
    doc = report.to_json()
    jsonschema.validate(doc, REPORT_SCHEMA)
    assert doc["summary"]["nodes"] == 1000 and all(n["commands"] == 0 for n in doc["nodes"])
    assert report.render().splitlines()[-1].startswith("1000 nodes: 992 in sync, 2 with drift, 6 not checked")


@pytest.mark.parametrize(("chosen", "status"), [(["node-0000", "node-0002"], EXIT_IN_SYNC),
                                                (["node-0000", "node-0001"], EXIT_DRIFT)])
def test_exit_statuses_are_drifts(tmp_path, in_cluster, stages, monkeypatch, chosen, status) -> None:
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(fleet_file(tmp_path / "cluster.yaml", 3)))
    digest = incluster.targets("inventory.py", stages)[0].digest
    drifted = copy.deepcopy(IN_SYNC)
    drifted["mig"]["layout"] = {"1g.18gb": 3}
    in_cluster.seed([pod("node-0000", published("node-0000", digest, IN_SYNC)),
                     pod("node-0001", published("node-0001", digest, drifted)),
                     pod("node-0002", published("node-0002", digest, IN_SYNC))])
    report = incluster.collect("inventory.py", stages, namespace=NAMESPACE, kubeconfig=str(in_cluster.kubeconfig),
                               limit=chosen)
    assert [n.name for n in report.nodes] == chosen and report.exit_status == status


def test_a_stage_that_needs_a_second_reading_is_reported_incomplete_not_as_drift(tmp_path, in_cluster, stages,
                                                                                 monkeypatch) -> None:
    from drift_samples import make_stage

    from gpu_provision.desired import PackageWant

    def asks_late(node, cluster, state):  # wants a package its request could not name (as the driver stage may)
        return [PackageWant("linux-headers-6.1.0-18-amd64", "6.1.76-1")]

    late = make_stage("late", lambda n, c, s: [])
    late.wants = asks_late
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(fleet_file(tmp_path / "cluster.yaml", 1)))
    digest = incluster.targets("inventory.py", [*stages, late])[0].digest
    in_cluster.seed([pod("node-0000", published("node-0000", digest, IN_SYNC))])
    report = incluster.collect("inventory.py", [*stages, late], namespace=NAMESPACE,
                               kubeconfig=str(in_cluster.kubeconfig))
    (node,) = report.nodes
    assert node.status == "error" and node.differences == []
    assert node.problems[0].startswith("stage late: ResultLacks: needs readings the published answer lacks")


def test_the_command_prints_drifts_report_and_exit_status(tmp_path, in_cluster, monkeypatch) -> None:
    """Through ``gpu-provision drift --in-cluster`` with every real stage: the pods' answers here are canned, so
    both nodes differ from the file; what matters is the same report, schema and exit status as over SSH."""
    from gpu_provision.drift import load_stages

    cluster = fleet_file(tmp_path / "cluster.yaml", 2, gpus=1)
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(cluster))
    targets = {t.name: t for t in incluster.targets("inventory.py", load_stages())}
    in_cluster.seed([pod(name, published(name, t.digest, IN_SYNC)) for name, t in targets.items()])
    argv = [sys.executable, "-m", "gpu_provision.cli", "drift", "--in-cluster", "--cluster", str(cluster),
            "--kubeconfig", str(in_cluster.kubeconfig)]
    env = dict(os.environ)
    proc = subprocess.run([*argv, "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    doc = json.loads(proc.stdout)
    jsonschema.validate(doc, REPORT_SCHEMA)
    assert proc.returncode == doc["exit_status"] and doc["summary"]["nodes"] == 2
    assert {n["status"] for n in doc["nodes"]} <= {"drift", "error"}
    text = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert text.returncode == proc.returncode
    assert text.stdout.splitlines()[-1].startswith("2 nodes: ")


def test_manifests_are_hardened_like_verification_and_valid(tmp_path, monkeypatch, stages) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(fleet_file(tmp_path / "cluster.yaml", 1000, gpus=600)))
    docs = incluster.manifests_for("inventory.py", stages)
    assert [d["kind"] for d in docs] == ["Namespace", "ConfigMap", "DaemonSet", "DaemonSet"]
    config = docs[1]
    assert sorted(config["data"]) == ["nodes.json", "probe.py", "publish.py",
                                      f"request-{incluster.targets('inventory.py', stages)[0].digest}.json"]
    assert len(json.loads(config["data"]["nodes.json"])) == 1000
    assert sum(len(v) for v in config["data"].values()) < incluster.MAX_CONFIG_BYTES
    gpu, other = docs[2], docs[3]
    for ds, count in ((gpu, 600), (other, 400)):
        kubernetes_validate.validate(ds, "1.31.0", strict=True)
        spec = ds["spec"]["template"]["spec"]
        assert spec["automountServiceAccountToken"] is False
        values = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
        assert len(values) == count
        assert [c["name"] for c in spec["initContainers"]] == incluster.part_names()
        for container in spec["initContainers"] + spec["containers"]:
            assert container["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}
            assert container["securityContext"] == {"allowPrivilegeEscalation": False}
            assert all(m.get("readOnly") for m in container.get("volumeMounts", []) if m["name"] != "parts")
        assert ds["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == incluster.COMPONENT
    assert gpu["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    assert "runtimeClassName" not in other["spec"]["template"]["spec"]
    for doc in docs[:2]:
        kubernetes_validate.validate(doc, "1.31.0", strict=True)


def test_manifests_take_the_image_through_the_mirror_and_the_files_tolerations(tmp_path, monkeypatch, stages):
    monkeypatch.chdir(ROOT)
    path = fleet_file(tmp_path / "cluster.yaml", 3, gpus=2)
    doc = json.loads(path.read_text())
    doc["nodes"][2]["role"] = "control-plane"
    doc["cluster"]["mirrors"] = {"registry": "registry.example.internal:5000"}
    doc["cluster"]["kubernetes"] = {"enabled": True, "verification": {
        "image": "python:3.12-slim@sha256:" + "a" * 64}}
    doc["nodes"][0]["taints"] = ["dedicated=gpu:NoSchedule"]
    path.write_text(json.dumps(doc))
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(path))
    from gpu_provision.spec import load_cluster
    from gpu_provision.verify.incluster import pod_settings

    expected = pod_settings(load_cluster(str(path)), ["node-0000", "node-0001", "node-0002"])
    assert expected["image"].startswith("registry.example.internal:5000/") and "@sha256:" in expected["image"]
    assert {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"} in expected["tolerations"]
    daemonsets = [d for d in incluster.manifests_for("inventory.py", stages) if d["kind"] == "DaemonSet"]
    assert len(daemonsets) == 2
    for ds in daemonsets:
        spec = ds["spec"]["template"]["spec"]
        assert {c["image"] for c in spec["initContainers"] + spec["containers"]} == {expected["image"]}
        assert spec["tolerations"] == expected["tolerations"]


def test_the_pod_side_runs_the_probe_and_publishes_parts_within_the_kubelets_limits(tmp_path, stages,
                                                                                    monkeypatch) -> None:
    """publish.py as the init containers run it, with this machine's root as the host's (no chroot): the real
    probe answers, the parts fit the kubelet's bounds, and the collector's decoder reads them back."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(fleet_file(tmp_path / "cluster.yaml", 1)))
    config = next(d for d in incluster.manifests_for("inventory.py", stages) if d["kind"] == "ConfigMap")
    config_dir, parts_dir = tmp_path / "config", tmp_path / "parts"
    config_dir.mkdir()
    parts_dir.mkdir()
    for name, text in config["data"].items():
        (config_dir / name).write_text(text)
    messages = []
    for index, part in enumerate(incluster.part_names()):
        log = tmp_path / f"termination-{part}"
        argv = ["probe"] if index == 0 else ["part", str(index)]
        env = {**os.environ, "NODE_NAME": "node-0000", "GPU_PROVISION_DRIFT_CONFIG": str(config_dir),
               "GPU_PROVISION_HOST_ROOT": "/", "GPU_PROVISION_PARTS_DIR": str(parts_dir),
               "GPU_PROVISION_TERMINATION_LOG": str(log)}
        done = subprocess.run([sys.executable, str(config_dir / "publish.py"), *argv], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        messages.append(log.read_text())
    assert all(len(m.encode()) <= publish.budget() for m in messages)
    assert publish.budget() * publish.CONTAINERS <= publish.PER_POD and publish.budget() <= publish.PER_CONTAINER
    result = publish.decode(messages)
    assert result["node"] == "node-0000" and "error" not in result, result
    assert result["request"] == incluster.targets("inventory.py", stages)[0].digest
    assert set(result["probe"]) >= {"system", "packages", "files", "services", "accounts"}
    # The pod starts the probe as SSH drift does (publish.py runs alone, so it keeps its own copy of the words).
    assert bundle.probe_argv({})[:-2] == publish.PROBE_ARGV


def test_an_answer_too_large_loses_file_texts_first_then_becomes_an_error() -> None:
    texts = {f"/etc/f{i}": {"exists": True, "sha256": os.urandom(32).hex(), "content": os.urandom(300).hex()}
             for i in range(40)}
    result = {"node": "n", "request": "r", "probe": {"files": texts}}
    slim = publish.decode(publish.fitted(result))
    assert slim["contents_dropped"] is True and all("content" not in f for f in slim["probe"]["files"].values())
    assert {p: f["sha256"] for p, f in slim["probe"]["files"].items()} == {p: f["sha256"] for p, f in texts.items()}
    huge = {"node": "n", "request": "r", "probe": {"packages": {os.urandom(8).hex(): os.urandom(32).hex()
                                                                for _ in range(400)}}}
    error = publish.decode(publish.fitted(huge))
    assert "does not fit" in error["error"] and error["request"] == "r" and "probe" not in error
    with pytest.raises(ValueError, match="not a published result"):
        publish.decode(["hello", "", ""])
