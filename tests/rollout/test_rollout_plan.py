"""``rollout plan``: drift's differences classed and batched, the file's settings and their overrides, exit
statuses, JSON and text; and the command as a user runs it against loopback nodes that do not answer."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpu_provision.desired import Difference
from gpu_provision.drift.report import FleetReport, NodeReport
from gpu_provision.errors import SpecError
from gpu_provision.rollout.plan import plan_rollout
from gpu_provision.spec import load_cluster

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Difference("package", "nvidia-driver-580-server-open", "580.159.04", "580.126.09", "driver")
MIG = Difference("mig-layout", "GPU 0", "1g.18gb x7", "MIG disabled", "mig")
CONTAINERD = Difference("file", "/etc/containerd/config.toml", "sha256 a", "sha256 b", "runtime")
GROUP = Difference("group-members", "gpu", ["alice"], [], "permissions")
KERNEL = Difference("preflight", "kernel-guard", "pass", "kernel 6.8.0-50 is installed but has no NVIDIA modules",
                    "preflight")


def write(path: Path, rollout: dict[str, Any] | None = None, workers: int = 4, port: int = 22) -> Path:
    nodes = [{"name": "cp-01", "address": "127.0.0.1", "role": "control-plane", "ssh": {"port": port}}]
    nodes += [{"name": f"gpu-{i:02d}", "address": f"127.0.0.{i + 1}", "group": "h200", "ssh": {"port": port}}
              for i in range(1, workers + 1)]
    nodes.append({"name": "cpu-01", "address": "127.0.0.99", "ssh": {"port": port}})
    cluster: dict[str, Any] = {"name": "roll", "kubernetes": {"enabled": False},
                               "ssh": {"connect_timeout": 1, "strict_host_key_checking": False}}
    if rollout is not None:
        cluster["rollout"] = rollout
    path.write_text(json.dumps({"version": "v1", "cluster": cluster,
                                "groups": {"h200": {"gpus": {"model": "H200", "count": 8}}}, "nodes": nodes}))
    return path


def report(**differences: list[Difference]) -> FleetReport:
    names = ["cp-01", "gpu-01", "gpu-02", "gpu-03", "gpu-04", "cpu-01"]
    return FleetReport(nodes=[NodeReport(n, "", differences=differences.get(n.replace("-", "_"), []))
                              for n in names], stages=["driver"])


def test_the_file_sets_the_rollout_and_defaults_follow_the_gpu_operator(tmp_path: Path) -> None:
    defaults = load_cluster(write(tmp_path / "a.yaml")).rollout
    assert (defaults.max_parallel, defaults.max_unavailable) == (1, "25%")
    assert (defaults.wait_for_jobs.timeout, defaults.wait_for_jobs.pod_selector, defaults.drain.timeout) == (
        0, None, 300)
    given = load_cluster(write(tmp_path / "b.yaml", {"max_parallel": 2, "max_unavailable": 3,
                                                      "wait_for_jobs": {"timeout": 600, "pod_selector": "app=train"},
                                                      "drain": {"timeout": 120}})).rollout
    assert (given.max_parallel, given.max_unavailable, given.wait_for_jobs.timeout,
            given.wait_for_jobs.pod_selector, given.drain.timeout) == (2, 3, 600, "app=train", 120)


@pytest.mark.parametrize(("rollout", "message"), [
    ({"max_parallel": 0}, "$.cluster.rollout.max_parallel"),
    ({"max_unavailable": 0}, "$.cluster.rollout.max_unavailable"),
    ({"max_unavailable": "0%"}, "$.cluster.rollout.max_unavailable"),
    ({"max_unavailable": "half"}, "$.cluster.rollout.max_unavailable"),
    ({"drain": {"timeout": 0}}, "$.cluster.rollout.drain.timeout"),
    ({"batch": 2}, "$.cluster.rollout"),
])
def test_bad_rollout_settings_are_located_errors(tmp_path: Path, rollout: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as caught:
        load_cluster(write(tmp_path / "bad.yaml", rollout))
    assert message in str(caught.value)


def test_each_node_gets_its_changes_classed_and_a_batch(tmp_path: Path) -> None:
    cluster = load_cluster(write(tmp_path / "c.yaml", {"max_parallel": 2, "max_unavailable": "50%"}))
    plan = plan_rollout(report(cp_01=[CONTAINERD], gpu_01=[DRIVER, GROUP], gpu_02=[MIG], gpu_03=[DRIVER],
                               gpu_04=[KERNEL], cpu_01=[GROUP]), cluster)
    nodes = {n.name: n for n in plan.nodes}
    assert [(c.disruption, c.difference) for c in nodes["gpu-01"].changes] == [("gpu-idle", DRIVER), ("none", GROUP)]
    assert {n.name: n.disruption for n in plan.nodes} == {
        "cp-01": "runtime-restart", "gpu-01": "gpu-idle", "gpu-02": "gpu-idle", "gpu-03": "gpu-idle",
        "gpu-04": "reboot", "cpu-01": "none"}
    # 4 GPU nodes at 50%: 2 at once; the control plane alone; cpu-01 disrupts nothing.
    assert [(b.index, list(b.nodes)) for b in plan.batches] == [
        (0, ["cpu-01"]), (1, ["cp-01"]), (2, ["gpu-01", "gpu-02"]), (3, ["gpu-03", "gpu-04"])]
    assert {n.name: n.batch for n in plan.nodes} == {"cp-01": 1, "gpu-01": 2, "gpu-02": 2, "gpu-03": 3,
                                                     "gpu-04": 3, "cpu-01": 0}
    assert plan.exit_status == 1


def test_the_command_line_overrides_the_file(tmp_path: Path) -> None:
    cluster = load_cluster(write(tmp_path / "d.yaml", {"max_parallel": 4, "max_unavailable": "100%"}))
    changes = report(gpu_01=[DRIVER], gpu_02=[DRIVER], gpu_03=[DRIVER], gpu_04=[DRIVER])
    assert [len(b.nodes) for b in plan_rollout(changes, cluster).batches] == [4]
    assert [len(b.nodes) for b in plan_rollout(changes, cluster, max_parallel=3).batches] == [3, 1]
    assert [len(b.nodes) for b in plan_rollout(changes, cluster, max_unavailable="25%").batches] == [1, 1, 1, 1]
    plan = plan_rollout(changes, cluster, 2, 1)
    assert (plan.max_parallel, plan.max_unavailable, [len(b.nodes) for b in plan.batches]) == (2, 1, [1, 1, 1, 1])


def test_percentages_count_the_whole_group_when_only_some_nodes_are_checked(tmp_path: Path) -> None:
    cluster = load_cluster(write(tmp_path / "e.yaml", {"max_parallel": 4, "max_unavailable": "50%"}))
    limited = FleetReport(nodes=[NodeReport("gpu-01", "", [DRIVER]), NodeReport("gpu-02", "", [DRIVER])],
                          stages=["driver"])
    assert [list(b.nodes) for b in plan_rollout(limited, cluster).batches] == [["gpu-01", "gpu-02"]]


def test_nothing_to_roll_exits_0_and_an_unreached_node_exits_2_without_a_batch(tmp_path: Path) -> None:
    cluster = load_cluster(write(tmp_path / "f.yaml"))
    quiet = plan_rollout(report(), cluster)
    assert (quiet.exit_status, quiet.batches) == (0, [])
    broken = report(gpu_01=[DRIVER])
    broken.nodes[2] = NodeReport("gpu-02", "", checked=False, problems=["unreachable: timed out"])
    broken.nodes[3] = NodeReport("gpu-03", "", [DRIVER], problems=["stage mig: RuntimeError: boom"])
    # The two nodes not compared count against group h200's max_unavailable, as in the run: 25% of 4 leaves
    # gpu-01 no room, so the plan says it stops there.
    blocked = plan_rollout(broken, cluster)
    assert (blocked.exit_status, blocked.batches) == (2, [])
    assert blocked.stopped.startswith("2 failed nodes of group h200 reach max_unavailable 25%")
    assert "stopped: 2 failed nodes of group h200" in blocked.render()
    plan = plan_rollout(broken, cluster, max_unavailable=3)
    assert plan.exit_status == 2
    assert [list(b.nodes) for b in plan.batches] == [["gpu-01"]]
    assert {n.name: (n.status, n.batch) for n in plan.nodes if n.name.startswith("gpu")} == {
        "gpu-01": ("planned", 1), "gpu-02": ("not-checked", None), "gpu-03": ("error", None),
        "gpu-04": ("in-sync", None)}


def test_json_and_text(tmp_path: Path) -> None:
    cluster = load_cluster(write(tmp_path / "g.yaml", {"wait_for_jobs": {"pod_selector": "team=vision"}}))
    plan = plan_rollout(report(gpu_01=[DRIVER], cpu_01=[GROUP]), cluster)
    doc = json.loads(json.dumps(plan.to_json()))
    assert doc["version"] == "gpu-provision.rollout-plan/v1"
    assert doc["settings"] == {"max_parallel": 1, "max_unavailable": "25%",
                               "wait_for_jobs": {"timeout": 0, "pod_selector": "team=vision"},
                               "drain": {"timeout": 300}}
    assert doc["summary"] == {"in-sync": 4, "planned": 2, "not-checked": 0, "error": 0}
    assert doc["batches"] == [{"index": 0, "disruptive": False, "nodes": ["cpu-01"]},
                              {"index": 1, "disruptive": True, "nodes": ["gpu-01"]}]
    gpu = next(n for n in doc["nodes"] if n["name"] == "gpu-01")
    assert gpu["group"] == "h200" and gpu["disruption"] == "gpu-idle" and gpu["batch"] == 1
    assert gpu["changes"][0]["disruption"] == "gpu-idle" and gpu["changes"][0]["kind"] == "package"
    text = plan.render().splitlines()
    assert text[0] == "rollout plan: 2 nodes to change in 2 batches (max_parallel 1, max_unavailable 25%)"
    assert text[1] == "  batch 0 (disrupts nothing, all at once): cpu-01"
    assert text[2] == "  batch 1 (1 node): gpu-01"
    assert "gpu-01  gpu-idle  batch 1" in text
    assert ("  gpu-idle  package nvidia-driver-580-server-open: expected 580.159.04, found 580.126.09") in text
    assert "cp-01   nothing to change" in text


def rollout(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpu_provision.cli", "rollout", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_the_command_reports_unreachable_nodes_and_exits_2(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    cluster = write(tmp_path / "h.yaml", workers=1, port=port)
    proc = rollout("plan", "inventory.py", "--cluster", str(cluster), "--limit", "gpu-01", "--max-parallel", "2",
                   "--max-unavailable", "50%", "--json")
    assert proc.returncode == 2, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["settings"]["max_parallel"] == 2 and doc["settings"]["max_unavailable"] == "50%"
    assert [(n["name"], n["status"], n["batch"]) for n in doc["nodes"]] == [("gpu-01", "not-checked", None)]
    assert doc["nodes"][0]["problems"][0].startswith("unreachable: Could not connect")


def test_bad_overrides_are_usage_errors(tmp_path: Path) -> None:
    cluster = write(tmp_path / "i.yaml", workers=1)
    proc = rollout("plan", "inventory.py", "--cluster", str(cluster), "--max-unavailable", "0%")
    assert proc.returncode == 2 and proc.stderr.startswith("--max-unavailable: expected a node count")
    proc = rollout("plan", "inventory.py", "--cluster", str(cluster), "--max-parallel", "0", "--json")
    assert proc.returncode == 2 and json.loads(proc.stdout)["error"]["message"].startswith("--max-parallel")


def test_a_differing_file_shows_as_drift_shows_it_not_as_sha256_values(tmp_path: Path) -> None:
    cluster = load_cluster(write(tmp_path / "j.yaml"))
    diff = ("--- /etc/containerd/config.toml (on the node)\n+++ /etc/containerd/config.toml (cluster file)\n"
            "@@ -1 +1 @@\n-default_runtime_name = \"runc\"\n+default_runtime_name = \"nvidia\"")
    drifted = report()
    drifted.nodes[1] = NodeReport("gpu-01", "", [CONTAINERD, GROUP], diffs={CONTAINERD.item: diff})
    plan = plan_rollout(drifted, cluster)
    text = plan.render().splitlines()
    head = text.index("  runtime-restart  file /etc/containerd/config.toml: content differs (- on the node, + expected):")
    assert text[head + 1:head + 6] == [f"      {line}" for line in diff.splitlines()]
    assert not any("sha256" in line for line in text)
    assert "  none             group-members gpu: expected [alice], found []" in text
    changes = next(n for n in plan.to_json()["nodes"] if n["name"] == "gpu-01")["changes"]
    assert [c.get("diff") for c in changes] == [diff, None]
