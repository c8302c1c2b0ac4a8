"""The rollout's pure parts: which pods hold a GPU and may be evicted, GPU containers from docker/ctr output, state
records (label, annotations, state file), the status table; and the command against nodes that do not answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rollout_fakes import gpu_pod

from gpu_provision.rollout import pods
from gpu_provision.rollout.containers import Container, parse_listing
from gpu_provision.rollout.engine import Outcome, Report
from gpu_provision.rollout.progress import (
    STATE_LABEL,
    NodeProgress,
    node_patch,
    progress_from_file,
    progress_from_node,
)
from gpu_provision.rollout.status import status_doc, status_exit, status_text

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_pods_jobs_and_eviction_rules():
    plain = gpu_pod("cpu", "n", owner="ReplicaSet")
    plain["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    mig = gpu_pod("mig", "n")
    mig["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.18gb": "2"}}
    done = gpu_pod("done", "n")
    done["status"]["phase"] = "Succeeded"
    assert pods.gpu_resources(mig) == {"nvidia.com/mig-1g.18gb": 2}
    assert [p["metadata"]["name"] for p in pods.holding([plain, mig, done])] == ["mig"]
    # Without a selector every GPU pod is a job; with one, the selected pods (GPU or not).
    assert [p["metadata"]["name"] for p in pods.jobs([plain, mig, done], None)] == ["mig"]
    assert [p["metadata"]["name"] for p in pods.jobs([plain, mig, done], "app=train")] == ["cpu", "mig"]
    assert pods.jobs([plain], "app!=train,team") == []
    daemon = gpu_pod("plugin", "n", owner="DaemonSet")
    assert pods.eviction_refusal(daemon, True, True) == "managed by a DaemonSet"
    assert "force" in pods.eviction_refusal(gpu_pod("bare", "n", owner=None), False, False)
    assert pods.eviction_refusal(gpu_pod("bare", "n", owner=None), True, False) is None
    assert "emptyDir" in pods.eviction_refusal(gpu_pod("e", "n", empty_dir=True), False, False)
    assert [p["metadata"]["name"] for p in pods.drainable([plain, daemon, done])] == ["cpu"]


DOCKER = [
    {"Id": "a" * 64, "Name": "/trainer", "HostConfig": {"DeviceRequests": [
        {"Driver": "", "Count": -1, "Capabilities": [["gpu"]]}]}, "Config": {"Env": []}},
    {"Id": "b" * 64, "Name": "/web", "HostConfig": {"DeviceRequests": None}, "Config": {"Env": ["PATH=/bin"]}},
    {"Id": "c" * 64, "Name": "/legacy", "HostConfig": {"Runtime": "nvidia"}, "Config": {"Env": []}},
    {"Id": "d" * 64, "Name": "/void", "HostConfig": {}, "Config": {"Env": ["NVIDIA_VISIBLE_DEVICES=void"]}},
    {"Id": "e" * 64, "Name": "/envonly", "HostConfig": {}, "Config": {"Env": ["NVIDIA_VISIBLE_DEVICES=0,1"]}},
]
CTR = {"ID": "job1", "Runtime": {"Name": "io.containerd.runc.v2"},
       "Spec": {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=all"]}, "linux": {}}}


def test_gpu_containers_from_docker_and_ctr():
    text = "### docker\n" + json.dumps(DOCKER) + "\n### ctr default job1\n" + json.dumps(CTR) + "\n### ctr x y\n{bad"
    found = parse_listing(text)
    assert [(c.runtime, c.name, c.why) for c in found] == [
        ("docker", "trainer", "a GPU device request"), ("docker", "legacy", "the nvidia runtime"),
        ("docker", "envonly", "NVIDIA_VISIBLE_DEVICES=0,1"), ("ctr", "job1", "NVIDIA_VISIBLE_DEVICES=all")]
    assert found[0].stop_command() == f"docker stop -t 30 {'a' * 64}"
    assert "ctr -n default tasks kill job1" in found[3].stop_command()
    assert Container("ctr", "j", "j", "x", "k8s.io").describe() == "ctr k8s.io container j (x)"
    assert parse_listing("") == []


def test_records_round_trip_through_node_labels_and_the_state_file():
    record = NodeProgress("upgrade-failed", "verification failed: gpu.driver", "2026-12-01T08:00:00Z", True)
    patch = node_patch(record)
    node = {"metadata": {"labels": patch["metadata"]["labels"], "annotations": patch["metadata"]["annotations"]}}
    assert node["metadata"]["labels"] == {STATE_LABEL: "upgrade-failed"}
    assert progress_from_node(node) == record
    assert progress_from_file(json.dumps(record.to_json())) == record
    # An empty reason removes the annotation (merge patch null).
    assert node_patch(NodeProgress("upgrade-done"))["metadata"]["annotations"]["gpu-provision.io/rollout-reason"] is None
    assert progress_from_file("") is None and progress_from_file('{"state": "bogus"}') is None
    assert progress_from_node({"metadata": {}}) is None


def test_status_table_and_exit():
    names = ["a", "b", "c"]
    doc = status_doc(names, {"a": NodeProgress("upgrade-done"), "b": NodeProgress("upgrade-failed", "drain failed"), "c": None},
                     {"a": {"spec": {}}, "b": {"spec": {"unschedulable": True}}})
    assert status_exit(doc) == 1
    text = status_text(doc).splitlines()
    assert text[0].split()[:3] == ["a", "upgrade-done", "schedulable"]
    assert "cordoned" in text[1] and text[1].endswith("failed: drain failed")
    assert "never rolled" in text[2]
    assert status_exit(status_doc(["a"], {"a": NodeProgress("upgrade-done")}, {})) == 0
    assert status_exit(status_doc(["a"], {"a": NodeProgress("unknown", "unreachable")}, {})) == 2


def test_report_json_and_exit():
    report = Report({"a": Outcome("a", "done", batch=1, states=[("upgrade-required", 1.0), ("upgrade-done", 2.5)],
                                  unavailable_s=1.5)}, batches=[(1, ("a",))])
    doc = report.to_json()
    assert doc["exit_status"] == 0 and doc["summary"]["done"] == 1
    assert doc["nodes"][0]["states"] == [{"state": "upgrade-required", "at": 1.0}, {"state": "upgrade-done",
                                                                                    "at": 2.5}]
    report.outcomes["b"] = Outcome("b", "not-started", "interrupted before its batch")
    assert report.exit_status == 1 and "not-started" in report.render()


def write_cluster(path: Path, port: int) -> Path:
    nodes = [{"name": f"gpu-{i}", "address": f"127.0.0.{i}", "gpus": {"model": "H200", "count": 1},
              "ssh": {"port": port}} for i in (1, 2)]
    path.write_text(json.dumps({"version": "v1", "cluster": {
        "name": "roll", "kubernetes": {"enabled": False},
        "ssh": {"connect_timeout": 1, "strict_host_key_checking": False}}, "nodes": nodes}))
    return path


def rollout(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpu_provision.cli", "rollout", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_the_command_refuses_to_roll_unreached_nodes_and_status_says_not_read(tmp_path, closed_port):
    cluster = write_cluster(tmp_path / "c.yaml", closed_port)
    ran = rollout("--cluster", str(cluster), "--json", "--poll", "0.1")
    assert ran.returncode == 2, ran.stdout + ran.stderr
    doc = json.loads(ran.stdout)
    assert doc["batches"] == []
    assert {n["name"]: n["result"] for n in doc["nodes"]} == {"gpu-1": "skipped", "gpu-2": "skipped"}
    assert all("not compared" in n["reason"] for n in doc["nodes"])
    status = rollout("status", "--cluster", str(cluster), "--json")
    assert status.returncode == 2, status.stdout + status.stderr
    assert {n["state"] for n in json.loads(status.stdout)["nodes"]} == {"unknown"}


def test_usage_errors(tmp_path, closed_port):
    cluster = write_cluster(tmp_path / "c.yaml", closed_port)
    bad = rollout("sideways", "inventory.py", "--cluster", str(cluster))
    assert bad.returncode == 2 and "unknown action 'sideways'" in bad.stderr
    assert rollout("--cluster", str(cluster), "--poll", "0").returncode == 2
    assert rollout("--cluster", str(cluster), "--max-parallel", "0").returncode == 2
    assert "Traceback" not in bad.stderr


def test_prepare_and_finish_through_the_command_on_unreached_nodes(tmp_path, closed_port):
    cluster = write_cluster(tmp_path / "c.yaml", closed_port)
    prepared = rollout("prepare", "--cluster", str(cluster), "--json", "--limit", "gpu-1")
    assert prepared.returncode == 2, prepared.stdout + prepared.stderr
    assert [n["name"] for n in json.loads(prepared.stdout)["nodes"]] == ["gpu-1"]
    finished = rollout("finish", "--cluster", str(cluster), "--json")
    assert finished.returncode == 2, finished.stdout + finished.stderr
    doc = json.loads(finished.stdout)
    assert {n["name"]: n["result"] for n in doc["nodes"]} == {"gpu-1": "skipped", "gpu-2": "skipped"}
    assert all(n["reason"].startswith("state not read") for n in doc["nodes"])


def test_finish_takes_the_nodes_left_in_progress_and_targets_follow_records(tmp_path):
    from gpu_provision.rollout.execute import finish_targets, targets_of
    from gpu_provision.rollout.plan import NodePlan, RolloutPlan
    from gpu_provision.spec import load_cluster

    cluster = load_cluster(write_cluster(tmp_path / "c.json", 22))
    recorded = {"gpu-1": NodeProgress("apply-required"), "gpu-2": NodeProgress("upgrade-done")}
    assert [t.name for t in finish_targets(cluster, ["gpu-1", "gpu-2"], recorded)] == ["gpu-1"]
    plan = RolloutPlan([NodePlan("gpu-1"), NodePlan("gpu-2")], [], 1, 1)
    failed = {"gpu-1": NodeProgress("upgrade-failed", "drain failed"), "gpu-2": NodeProgress("cordon-required")}
    roll, skipped = targets_of(plan, cluster, failed, retry_failed=False)
    assert [t.name for t in roll] == ["gpu-2"] and [t.name for t in skipped] == ["gpu-1"]
    roll, skipped = targets_of(plan, cluster, failed, retry_failed=True)
    assert [t.name for t in roll] == ["gpu-1", "gpu-2"] and skipped == []
    roll, skipped = targets_of(plan, cluster, {"gpu-1": NodeProgress("upgrade-done")}, retry_failed=False)
    assert roll == [] and skipped == []


def test_a_limited_run_warns_of_labels_only_the_control_plane_applies(tmp_path):
    """A node whose MIG strategy the file changes needs its device plugin config label (applied by the first control
    plane's deploy alone): a run that leaves the control plane out says so, naming the label and the fix."""
    from gpu_provision.rollout.execute import labels_left_to_the_control_plane
    from gpu_provision.spec import load_cluster

    path = tmp_path / "k.json"
    path.write_text(json.dumps({"version": "v1", "cluster": {"name": "k"}, "nodes": [
        {"name": "cp-1", "address": "192.0.2.1", "role": "control-plane"},
        {"name": "gpu-1", "address": "192.0.2.2", "gpus": {"model": "H200", "count": 1},
         "mig": {"layout": {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}}}]}))
    cluster = load_cluster(path)
    from gpu_provision.k8s.nodes import CONFIG_LABEL, labels

    gpu = next(n for n in cluster.nodes if n.name == "gpu-1")
    wanted = labels(gpu)
    assert wanted[CONFIG_LABEL] == "mig-mixed"
    stale = {"metadata": {"name": "gpu-1", "labels": {**wanted, CONFIG_LABEL: "mig-single"}}}
    [line] = labels_left_to_the_control_plane(cluster, ["gpu-1"], "cp-1", [stale])
    assert line.startswith("warning: gpu-1's labels differ from the file")
    assert f"{CONFIG_LABEL}: mig-single -> mig-mixed" in line and "add cp-1 to --limit" in line
    # Nothing to say once the labels are right, or when the control plane is in the run.
    current = {"metadata": {"name": "gpu-1", "labels": dict(wanted)}}
    assert labels_left_to_the_control_plane(cluster, ["gpu-1"], "cp-1", [current]) == []
    assert labels_left_to_the_control_plane(cluster, ["cp-1", "gpu-1"], "cp-1", [stale]) == []
