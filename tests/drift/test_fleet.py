"""Fleet checks through pyinfra: one remote command per node whatever the number of wants, unreachable and
stalled nodes listed as not checked with the reason, probe failures reported, exit statuses."""

from __future__ import annotations

import json
from typing import Any

import pytest
from drift_samples import IN_SYNC, make_stage
from pyinfra.api import Inventory

from gpu_provision import bundle
from gpu_provision.desired import FileWant, PackageWant
from gpu_provision.drift import check_fleet
from gpu_provision.drift.report import EXIT_DRIFT, EXIT_ERROR, EXIT_IN_SYNC
from gpu_provision.fleet import FleetSettings
from gpu_provision.operations.remote import STATUS_MARK
from gpu_provision.spec.model import Node


def resolve(host: Any) -> tuple[Node, Any]:
    return Node(name=host.name, address=str(host.data.get("ssh_hostname") or "fake")), None


def fake(name: str, answer: Any, success: bool = True, stderr: str | list[str] = "") -> tuple[str, dict[str, Any]]:
    """A @fake host whose probe command answers ``answer`` (or fails with ``stderr``, which may end with the exit
    status the node's shell reports)."""
    response = {"success": success, "stdout": json.dumps(answer) if success else "", "stderr": stderr}
    return f"@fake/{name}", {"fake_responses": {f"{bundle.PROBE_PYTHON} -c": response}, "fake_delay": 0, "fake_delay_jitter": 0}


def run(hosts: list[tuple[str, dict[str, Any]]], stages: list[Any], **settings: Any):
    return check_fleet(Inventory((hosts, {})), stages, FleetSettings(**settings), resolve=resolve)


def many_file_stage(count: int) -> Any:
    """A stage with ``count`` file wants plus one package (all absent on the fake node)."""
    def wants(node: Any, cluster: Any, state: Any) -> list[Any]:
        return [PackageWant("containerd", "1.6.20~ds1-1")] + [FileWant(f"/etc/bench/{i}.conf", content="x\n")
                                                              for i in range(count)]
    return make_stage("many", wants)


def test_in_sync_fleet_costs_one_command_per_node_and_exits_0(stages, in_sync):
    report = run([fake("a", in_sync), fake("b", in_sync)], stages)
    assert [n.status for n in report.nodes] == ["in-sync", "in-sync"]
    assert [n.commands for n in report.nodes] == [1, 1]
    assert report.exit_status == EXIT_IN_SYNC


@pytest.mark.parametrize("wants", [1, 10, 200])
def test_command_count_does_not_grow_with_the_number_of_wants(wants):
    report = run([fake("a", {"system": {}})], [many_file_stage(wants)])
    node = report.nodes[0]
    assert node.commands == 1
    assert len(node.differences) == wants + 1  # every file and the package are absent


def test_drift_on_one_node_exits_1_and_names_only_that_node(stages, in_sync):
    drifted = json.loads(json.dumps(IN_SYNC))
    drifted["packages"]["packages"]["containerd"]["held"] = False
    report = run([fake("a", in_sync), fake("b", drifted)], stages)
    assert [(n.name, n.status) for n in report.nodes] == [("@fake/a", "in-sync"), ("@fake/b", "drift")]
    assert [(d.stage, d.kind, d.item) for d in report.nodes[1].differences] == [
        ("runtime", "package-hold", "containerd")]
    assert report.exit_status == EXIT_DRIFT


def test_unreachable_node_is_listed_with_its_reason_and_the_rest_is_checked(stages, in_sync, closed_port):
    down = ("down", {"ssh_hostname": "127.0.0.1", "ssh_port": closed_port})
    report = run([fake("a", in_sync), down], stages, connect_timeout=2)
    by_name = {n.name: n for n in report.nodes}
    assert by_name["@fake/a"].status == "in-sync"
    assert by_name["down"].status == "not-checked"
    assert by_name["down"].commands == 0
    assert by_name["down"].problems[0].startswith("unreachable: Could not connect")
    assert str(closed_port) in by_name["down"].problems[0]
    assert report.exit_status == EXIT_ERROR


def test_node_that_accepts_and_stalls_is_not_checked_and_does_not_block(stages, in_sync, silent_listener):
    address, port = silent_listener
    stalled = ("stalled", {"ssh_hostname": address, "ssh_port": port})
    report = run([stalled, fake("a", in_sync)], stages, connect_timeout=1)
    by_name = {n.name: n for n in report.nodes}
    assert by_name["@fake/a"].status == "in-sync"
    assert by_name["stalled"].status == "not-checked"
    # The exact paramiko message depends on whether sockets are gevent-patched (the CLI test checks it there).
    assert by_name["stalled"].problems[0].startswith("unreachable: SSH error")


def test_drift_and_an_unreachable_node_still_exit_2(stages, in_sync, closed_port):
    drifted = json.loads(json.dumps(IN_SYNC))
    drifted["services"]["containerd.service"]["enabled"] = "disabled"
    down = ("down", {"ssh_hostname": "127.0.0.1", "ssh_port": closed_port})
    report = run([fake("b", drifted), down], stages, connect_timeout=2)
    assert [n.status for n in report.nodes] == ["drift", "not-checked"]
    assert report.exit_status == EXIT_ERROR


def test_failed_probe_is_not_checked_with_the_remote_message(stages):
    failing = fake("a", None, success=False, stderr=["python3: can't open file", "", f"{STATUS_MARK}2"])
    report = run([failing], stages)
    node = report.nodes[0]
    assert node.status == "not-checked"
    (problem,) = node.problems
    # Told as every failed command is: the command, its exit status, its last lines.
    assert problem.startswith(f"probe failed: if command -v python3 >/dev/null 2>&1; then ( {bundle.PROBE_PYTHON} -c")
    assert problem.endswith("... exited 2: python3: can't open file")
    assert node.commands == 1


def test_failed_probe_section_marks_the_node_incomplete(stages, in_sync):
    in_sync["services"] = {"error": "FileNotFoundError: systemctl"}
    report = run([fake("a", in_sync)], stages)
    node = report.nodes[0]
    assert node.status == "error"
    assert node.problems == ["probe section services failed: FileNotFoundError: systemctl"]
    assert report.exit_status == EXIT_ERROR


def test_limit_checks_only_the_named_nodes(stages, in_sync):
    report = run([fake("a", in_sync), fake("b", in_sync)], stages, limit=("@fake/b",))
    assert [n.name for n in report.nodes] == ["@fake/b"]


def test_empty_inventory_is_a_user_error(stages):
    from gpu_provision.errors import GpuProvisionError

    with pytest.raises(GpuProvisionError, match="no hosts"):
        run([], stages)
    with pytest.raises(GpuProvisionError, match="does not have: nope"):
        run([fake("a", {})], stages, limit=("nope",))
