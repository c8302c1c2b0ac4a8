"""Reports captured on real H200 machines: schema-valid, read back through the parser, summarized in the table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_provision.verify import table
from gpu_provision.verify.report import error_report, fleet_ok, parse_report, row, schema_problems

DEVICE = Path(__file__).resolve().parents[1] / "fixtures" / "device"
REPORTS = ["verify-report-h200.json", "verify-report-h200-cold.json", "verify-report-h200x2.json"]


def load(name: str) -> dict:
    return json.loads((DEVICE / name).read_text())


@pytest.mark.parametrize("name", REPORTS)
def test_real_reports_are_schema_valid_and_round_trip(name: str) -> None:
    text = (DEVICE / name).read_text()
    report = json.loads(text)
    assert schema_problems(report) == []
    assert parse_report("ignored", text) == report
    assert parse_report("ignored", json.dumps(report, separators=(",", ":"))) == report


def test_real_one_gpu_figures() -> None:
    report = load("verify-report-h200.json")
    checks = {c["id"]: c for c in report["checks"]}
    assert report["status"] == "pass" and report["summary"] == {"pass": 17, "fail": 0, "skip": 4, "total": 21}
    assert checks["gpu0.cuda.vector_add"]["measured"]["mismatches"] == 0
    assert checks["gpu0.memory.bandwidth"]["measured"]["gbps"] >= checks["gpu0.memory.bandwidth"]["expected"]["min_gbps"]
    assert checks["gpu0.pcie.link_gen"]["measured"] == 5 and checks["gpu0.pcie.link_width"]["measured"] == 16
    assert checks["gpu0.persistence"]["measured"] is True
    assert checks["gpu0.ecc.uncorrected"]["measured"] == {"volatile": 0, "aggregate": 0}


def test_real_two_gpu_report_checks_every_gpu_and_pair() -> None:
    report = load("verify-report-h200x2.json")
    ids = {c["id"] for c in report["checks"]}
    for gpu in (0, 1):
        assert {f"gpu{gpu}.cuda.vector_add", f"gpu{gpu}.memory.bandwidth", f"gpu{gpu}.ecc.uncorrected"} <= ids
    pairs = {c["id"]: c for c in report["checks"] if ".p2p." in c["id"]}
    assert set(pairs) == {"gpu0-gpu1.p2p.access", "gpu0-gpu1.p2p.bandwidth", "gpu1-gpu0.p2p.access",
                          "gpu1-gpu0.p2p.bandwidth"}
    assert all(c["status"] == "pass" for c in pairs.values())
    assert pairs["gpu0-gpu1.p2p.access"]["measured"]["nvml"] == {"read": "OK", "write": "OK"}


def test_compact_one_line_report_from_the_system_python() -> None:
    text = (DEVICE / "verify-report-h200x2-compact.txt").read_text()
    assert text.count("\n") == 1
    report = parse_report("ignored", text)
    assert report["status"] == "pass" and report["summary"]["fail"] == 0
    assert {c["id"] for c in report["checks"]} == {c["id"] for c in load("verify-report-h200x2.json")["checks"]}


def test_pyinfra_cli_capture_shows_the_fleet_table() -> None:
    lines = (DEVICE / "pyinfra-cli-deploy-h200x2.txt").read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("NODE "))
    assert lines[header + 1].split()[:7] == ["h200x2-node", "PASS", "2/2", "32", "0", "5", "2.8s"]
    assert "1 of 1 node(s) passed" in lines


def test_pyinfra_local_capture_is_a_list_of_valid_reports() -> None:
    reports = json.loads((DEVICE / "pyinfra-local-h200x2.json").read_text())
    assert isinstance(reports, list) and len(reports) == 1
    assert schema_problems(reports[0]) == [] and reports[0]["status"] == "pass"


def test_table_rows_from_real_reports() -> None:
    reports = [load("verify-report-h200.json"), load("verify-report-h200x2.json")]
    one, two = row(reports[0]), row(reports[1])
    assert (one.gpus_found, one.gpus_expected, one.failed) == (1, 1, 0)
    assert (two.gpus_found, two.gpus_expected, two.passed) == (2, 2, 32)
    text = table.format_table(reports)
    lines = text.splitlines()
    assert lines[0].startswith("NODE") and lines[1].startswith("h200-node ") and lines[2].startswith("h200x2-node")
    assert lines[-1] == "2 of 2 node(s) passed"
    assert fleet_ok(reports)


def test_table_shows_first_failure_and_errors() -> None:
    bad = load("verify-report-h200.json")
    bad["node"] = "gpu-07"
    check = next(c for c in bad["checks"] if c["id"] == "gpu0.memory.bandwidth")
    check.update(status="fail", reason="3000 GB/s is 62% of the model's 4800 GB/s (floor 85%)")
    bad["summary"] = {"pass": 16, "fail": 1, "skip": 4, "total": 21}
    bad["status"] = "fail"
    down = error_report("gpu-08", "host not reachable")
    assert schema_problems(bad) == [] and schema_problems(down) == []
    lines = table.format_table([load("verify-report-h200.json"), bad, down]).splitlines()
    assert lines[1].split()[:2] == ["gpu-07", "FAIL"]
    assert lines[1].endswith("gpu0.memory.bandwidth: 3000 GB/s is 62% of the model's 4800 GB/s (floor 85%)")
    assert lines[2].split()[:3] == ["gpu-08", "ERROR", "?/?"] and lines[2].endswith("host not reachable")
    assert lines[-1] == "1 of 3 node(s) passed, 2 failed"
    # Columns line up: each row's status and GPU cells start where their headers do.
    status_at, gpus_at = lines[0].index("STATUS"), lines[0].index("GPUS")
    assert [line[status_at:].split()[0] for line in lines[1:4]] == ["FAIL", "ERROR", "PASS"]
    assert [line[gpus_at:].split()[0] for line in lines[1:4]] == ["1/1", "?/?", "1/1"]
    assert not fleet_ok([bad])


@pytest.mark.parametrize(("text", "reason"), [
    ("", "agent printed no report: no output"),
    ("python3: command not found", "agent printed no report: python3: command not found"),
    ("{not json", "agent output is not JSON"),
    ('{"schema": "verify-report.v1"}', "agent report breaks the schema"),
])
def test_unusable_output_becomes_error_report(text: str, reason: str) -> None:
    report = parse_report("gpu-01", text)
    assert report["status"] == "error" and report["error"].startswith(reason)
    assert schema_problems(report) == []


def test_schema_rejects_a_pass_without_fields_and_a_skip_without_reason() -> None:
    report = load("verify-report-h200.json")
    report["checks"][0].pop("measured")
    assert any("measured" in p for p in schema_problems(report))
    report = load("verify-report-h200.json")
    skip = next(c for c in report["checks"] if c["status"] == "skip")
    skip["reason"] = ""
    assert schema_problems(report)
