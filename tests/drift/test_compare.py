"""The drift engine on canned probe answers: exactly the differences there are, stage by stage."""

from __future__ import annotations

from typing import Any

from drift_samples import make_stage

from gpu_provision.desired import Difference, PackageWant
from gpu_provision.drift import node_differences, node_request
from gpu_provision.spec.model import Node
from gpu_provision.state import NodeStateData, Request

NODE = Node(name="n1", address="127.0.0.1")
CLUSTER: Any = None


def test_in_sync_node_has_no_differences(stages, in_sync):
    result = node_differences(NODE, CLUSTER, NodeStateData(in_sync), stages)
    assert result.differences == []
    assert result.problems == []


def test_request_is_the_union_of_every_stage(stages):
    req = node_request(NODE, CLUSTER, stages)
    assert req.packages == {"containerd"}
    assert req.files == {"/etc/docker/daemon.json", "/etc/modprobe.d/gpu-provision-nvidia.conf"}
    assert req.units == {"containerd.service"}
    assert req.groups == {"gpu"}
    assert req.sections == {"system", "mig"}


def test_each_hand_made_change_is_reported_once_with_expected_and_actual(stages, in_sync):
    state = in_sync
    state["packages"]["packages"]["containerd"]["held"] = False
    state["files"]["/etc/docker/daemon.json"]["sha256"] = "0" * 64
    state["files"]["/etc/modprobe.d/gpu-provision-nvidia.conf"]["mode"] = "0600"
    state["services"]["containerd.service"]["active"] = "failed"
    state["accounts"]["gpu"]["members"] = []
    state["mig"]["layout"] = {"3g.71gb": 2}

    result = node_differences(NODE, CLUSTER, NodeStateData(state), stages)

    assert result.problems == []
    assert sorted(result.differences, key=str) == sorted([
        Difference("package-hold", "containerd", "held", "not held", "runtime"),
        Difference("file", "/etc/docker/daemon.json", result.differences[1].expected, "sha256 000000000000",
                   "runtime"),
        Difference("service-active", "containerd.service", "active", "failed", "runtime"),
        Difference("group-members", "gpu", ["alice"], [], "permissions"),
        Difference("file-mode", "/etc/modprobe.d/gpu-provision-nvidia.conf", "0644", "0600", "permissions"),
        Difference("mig-layout", "GPU 0", {"1g.18gb": 7}, {"3g.71gb": 2}, "mig"),
    ], key=str)
    assert result.differences[1].expected.startswith("sha256 ")


def test_package_version_drift_and_absence(stages, in_sync):
    in_sync["packages"]["packages"]["containerd"] = {"version": "1.7.0-1", "held": True}
    diffs = node_differences(NODE, CLUSTER, NodeStateData(in_sync), stages).differences
    assert diffs == [Difference("package", "containerd", "1.6.20~ds1-1", "1.7.0-1", "runtime")]
    in_sync["packages"]["packages"]["containerd"] = {"version": None, "held": False}
    diffs = node_differences(NODE, CLUSTER, NodeStateData(in_sync), stages).differences
    assert diffs == [Difference("package", "containerd", "1.6.20~ds1-1", "absent", "runtime")]


def test_a_failing_stage_is_a_problem_and_the_others_are_still_compared(stages, in_sync):
    def broken(node: Any, cluster: Any, state: Any) -> list[Any]:
        raise KeyError("gpus")

    in_sync["accounts"]["gpu"] = None
    stages.insert(0, make_stage("broken", lambda n, c, s: []))
    stages[0].wants = broken
    result = node_differences(NODE, CLUSTER, NodeStateData(in_sync), stages)
    assert result.problems == ["stage broken: KeyError: 'gpus'"]
    assert result.differences == [Difference("group", "gpu", "present", "absent", "permissions")]


def test_wants_beyond_the_request_are_fetched_not_reported_as_missing(in_sync):
    # A stage whose wants depend on the state it sees may name a package its request did not.
    def wants(node: Any, cluster: Any, state: NodeStateData) -> list[Any]:
        return [PackageWant("containerd", "1.6.20~ds1-1"), PackageWant("runc", "1.1.5")]

    stage = make_stage("late", lambda n, c, s: [PackageWant("containerd", "1.6.20~ds1-1")])
    stage.wants = wants
    partial = NodeStateData({"packages": {"packages": {"containerd": {"version": "1.6.20~ds1-1", "held": True}}}})
    asked: list[Request] = []

    def refetch(request: Request) -> NodeStateData:
        asked.append(request)
        full = dict(partial.raw)
        full["packages"] = {"packages": {**partial.raw["packages"]["packages"],
                                         "runc": {"version": "1.1.5-1", "held": False}}}
        return NodeStateData(full)

    result = node_differences(NODE, CLUSTER, partial, [stage], refetch=refetch)
    assert [r.packages for r in asked] == [{"containerd", "runc"}]
    assert result.differences == []
    without = node_differences(NODE, CLUSTER, partial, [stage])
    assert without.differences == [Difference("package", "runc", "1.1.5", "absent", "late")]
