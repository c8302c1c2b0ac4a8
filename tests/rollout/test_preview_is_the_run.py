"""``rollout plan``'s batches are the run's: the same fleet (drift's differences and the nodes' recorded states)
previewed by :func:`plan_rollout` and carried out by the engine against fake nodes gives the same batches, the same
nodes left out and the same reason to stop, whatever the parallelism, the budgets, the failed nodes already
counting against them, the control planes or the nodes already done."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from rollout_fakes import FakeNode, thread_batches

from gpu_provision.desired import Difference
from gpu_provision.drift.report import FleetReport, NodeReport
from gpu_provision.rollout.engine import RolloutRun
from gpu_provision.rollout.execute import policy_of
from gpu_provision.rollout.plan import group_sizes, plan_rollout, targets_of
from gpu_provision.rollout.progress import NodeProgress
from gpu_provision.spec import load_cluster

DRIVER = Difference("package", "nvidia-driver", "580.159.04", "580.126.09", "driver")
CONTAINERD = Difference("file", "/etc/containerd/config.toml", "sha256 a", "sha256 b", "runtime")
GROUP = Difference("group-members", "gpu", ["alice"], [], "permissions")
NOT_REACHED = "not reached"

#: name -> (role, group): two control planes, six GPU workers in two groups, a CPU node without a group.
FLEET = {"cp-01": ("control-plane", ""), "cp-02": ("control-plane", ""),
         **{f"a-{i}": ("worker", "a") for i in range(1, 5)}, **{f"b-{i}": ("worker", "b") for i in (1, 2)},
         "cpu-01": ("worker", "")}


def cluster_file(path: Path, rollout: dict[str, Any]) -> Path:
    nodes = []
    for i, (name, (role, group)) in enumerate(FLEET.items(), start=2):
        node: dict[str, Any] = {"name": name, "address": f"127.0.0.{i}", "role": role}
        if group:
            node["group"] = group
        nodes.append(node)
    doc = {"version": "v1", "cluster": {"name": "same", "kubernetes": {"enabled": False}, "rollout": rollout},
           "groups": {"a": {"gpus": {"model": "H200", "count": 8}}, "b": {"gpus": {"model": "H200", "count": 8}}},
           "nodes": nodes}
    path.write_text(json.dumps(doc))
    return path


def drift(changes: dict[str, list[Difference] | str]) -> FleetReport:
    """Drift's report: a node's differences, or NOT_REACHED."""
    nodes = []
    for name in FLEET:
        given = changes.get(name, [])
        if given == NOT_REACHED:
            nodes.append(NodeReport(name, "", checked=False, problems=["unreachable: timed out"]))
        else:
            nodes.append(NodeReport(name, "", differences=list(given)))
    return FleetReport(nodes=nodes, stages=["driver"])


ALL_GPU = {name: [DRIVER] for name in FLEET if name[0] in "ab"}

FLEETS = {
    "parallel two, half of each group": (
        {"max_parallel": 2, "max_unavailable": "50%"}, {**ALL_GPU, "cpu-01": [GROUP]}, {}, False),
    "parallel four, one of each group": ({"max_parallel": 4, "max_unavailable": 1}, ALL_GPU, {}, False),
    "one at a time": ({}, {"a-1": [DRIVER], "a-3": [DRIVER], "b-2": [DRIVER]}, {}, False),
    "control planes alone, first": (
        {"max_parallel": 3, "max_unavailable": "100%"},
        {**ALL_GPU, "cp-01": [CONTAINERD], "cp-02": [DRIVER], "cpu-01": [GROUP]}, {}, False),
    "a failed node uses its group's budget": (
        {"max_parallel": 4, "max_unavailable": "50%"}, ALL_GPU,
        {"a-1": NodeProgress("upgrade-failed", "drain failed")}, False),
    "failed and unreached nodes use the whole budget": (
        {"max_parallel": 4, "max_unavailable": "50%"}, {**ALL_GPU, "a-2": NOT_REACHED},
        {"a-1": NodeProgress("upgrade-failed", "drain failed")}, False),
    "a retried failed node goes first": (
        {"max_parallel": 2, "max_unavailable": "50%"}, ALL_GPU,
        {"a-4": NodeProgress("upgrade-failed", "verification failed")}, True),
    "done nodes are left, nodes in progress resume first": (
        {"max_parallel": 2, "max_unavailable": 2},
        {"a-3": [DRIVER], "a-4": [DRIVER], "b-1": [DRIVER], "cpu-01": [GROUP]},
        {"a-1": NodeProgress("upgrade-done"), "a-2": NodeProgress("apply-required"), "a-3": NodeProgress("upgrade-done"),
         "cp-01": NodeProgress("validation-required")}, False),
}


@pytest.mark.parametrize("fleet", list(FLEETS), ids=list(FLEETS))
def test_the_preview_batches_are_the_run_batches(tmp_path: Path, fleet: str) -> None:
    rollout, changes, recorded, retry = FLEETS[fleet]
    cluster = load_cluster(cluster_file(tmp_path / "c.json", rollout))
    plan = plan_rollout(drift(changes), cluster, recorded=recorded, retry_failed=retry)

    roll, skipped = targets_of(plan, cluster, recorded, retry)
    lock, log = threading.Lock(), []
    nodes = {t.name: FakeNode(t.name, None, log, lock) for t in roll}
    report = RolloutRun(policy_of(cluster, poll=0.001), None, thread_batches(nodes)).run(
        roll, group_sizes(cluster), skipped)

    preview = [(b.index, list(b.nodes)) for b in plan.batches]
    assert preview, "every fleet here has a batch to compare"
    assert preview == [(index, list(names)) for index, names in report.batches], report.render()
    assert plan.stopped == report.stopped
    batched = {n.name for n in plan.nodes if n.batch is not None}
    assert batched == {name for name, o in report.outcomes.items() if o.result == "done"}


def test_the_fleets_cover_what_the_batcher_decides_on(tmp_path: Path) -> None:
    """The cases above differ where the batcher does: a plan that ignored records or failures would differ."""
    rollout, changes, recorded, retry = FLEETS["failed and unreached nodes use the whole budget"]
    cluster = load_cluster(cluster_file(tmp_path / "c.json", rollout))
    plan = plan_rollout(drift(changes), cluster, recorded=recorded, retry_failed=retry)
    assert [list(b.nodes) for b in plan.batches] == [["b-1"], ["b-2"]]
    assert plan.stopped.startswith("2 failed nodes of group a reach max_unavailable 50%")
    assert {n.name: n.skipped.split(" (")[0] for n in plan.nodes if n.skipped} == {
        "a-1": "failed in an earlier run", "a-2": "not compared: unreachable: timed out; it counts as unavailable"}

    rollout, changes, recorded, retry = FLEETS["done nodes are left, nodes in progress resume first"]
    cluster = load_cluster(cluster_file(tmp_path / "d.json", rollout))
    plan = plan_rollout(drift(changes), cluster, recorded=recorded, retry_failed=retry)
    assert [(b.index, list(b.nodes)) for b in plan.batches] == [
        (0, ["cpu-01"]), (1, ["cp-01"]), (2, ["a-2", "a-3"]), (3, ["a-4", "b-1"])]
    assert {n.name: n.batch for n in plan.nodes}["a-1"] is None
    assert "a-2     resumes from apply-required, batch 2" in plan.render().splitlines()
