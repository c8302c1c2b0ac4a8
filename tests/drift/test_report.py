"""The report's statuses, exit codes, JSON schema and text form."""

from __future__ import annotations

import jsonschema

from gpu_provision.desired import Difference
from gpu_provision.drift.report import FleetReport, NodeReport
from gpu_provision.drift.schema import REPORT_SCHEMA

DIFF = Difference("package", "nvidia-driver", "580.159.04", "580.126.09-1", "driver")


def fleet(*nodes: NodeReport) -> FleetReport:
    return FleetReport(nodes=list(nodes), stages=["driver"], seconds=0.5, parallel=2, connect_timeout=10)


def test_exit_status_follows_diff():
    ok = NodeReport("a", "127.0.10.1", commands=1)
    drifted = NodeReport("b", "127.0.10.2", differences=[DIFF], commands=1)
    down = NodeReport("c", "127.0.10.3", checked=False, problems=["unreachable: Could not connect"])
    partial = NodeReport("d", "127.0.10.4", problems=["stage mig: KeyError: 0"], commands=1)
    assert fleet(ok).exit_status == 0
    assert fleet(ok, drifted).exit_status == 1
    assert fleet(ok, down).exit_status == 2
    assert fleet(drifted, down).exit_status == 2
    assert fleet(ok, partial).exit_status == 2
    assert fleet(ok, drifted, down, partial).counts() == {"in-sync": 1, "drift": 1, "not-checked": 1, "error": 1}


def test_json_matches_the_schema_and_keeps_expected_and_actual():
    drifted = NodeReport("b", "127.0.10.2", commands=1, differences=[
        DIFF, Difference("group-members", "gpu", ["alice", "bob"], ["alice"], "permissions"),
        Difference("mig-layout", "GPU 0", {"1g.18gb": 7}, None, "mig")])
    down = NodeReport("c", "127.0.10.3", checked=False, problems=["unreachable: Could not connect"])
    doc = fleet(drifted, down).to_json()
    jsonschema.validate(doc, REPORT_SCHEMA)
    assert doc["summary"] == {"in-sync": 0, "drift": 1, "not-checked": 1, "error": 0, "nodes": 2, "differences": 3}
    assert doc["nodes"][0]["differences"][0] == {"stage": "driver", "kind": "package", "item": "nvidia-driver",
                                                "expected": "580.159.04", "actual": "580.126.09-1"}
    assert doc["nodes"][0]["differences"][2]["expected"] == {"1g.18gb": 7}
    assert doc["nodes"][1]["status"] == "not-checked"


def test_text_names_each_difference_and_each_unchecked_node():
    drifted = NodeReport("gpu-node-b", "127.0.10.2", differences=[DIFF], commands=1, seconds=0.25)
    down = NodeReport("c", "127.0.10.3", checked=False, problems=["unreachable: Could not connect"])
    text = fleet(drifted, down).render().splitlines()
    assert text == [
        "gpu-node-b  drift (1)  [1 command, 0.25 s]",
        "  driver: package nvidia-driver: expected 580.159.04, found 580.126.09-1",
        "c           not checked: unreachable: Could not connect",
        "2 nodes: 0 in sync, 1 with drift, 1 not checked (0.50 s)",
    ]
