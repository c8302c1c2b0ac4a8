"""The ``VerifyReport`` fact: the command it sends, and what it makes of the agent's output."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from gpu_provision.facts.verify import VerifyReport

DEVICE = Path(__file__).resolve().parents[1] / "fixtures" / "device"


def test_command_quotes_paths_and_survives_failing_checks() -> None:
    fact = VerifyReport()
    command = fact.command("/var/lib/gpu provision/gpu-provision-node.pyz", "/etc/x.json", node="gpu-01")
    assert command.startswith("python3 '/var/lib/gpu provision/gpu-provision-node.pyz' verify --expect /etc/x.json")
    # Exit 1 (a check failed) and 2 (agent error) count as success for the fact; 127 prints a message.
    for status, printed in ((0, ""), (1, ""), (2, ""), (127, "verification agent did not run (is python3 installed?)")):
        shell = command.replace("python3 '/var/lib/gpu provision/gpu-provision-node.pyz' verify --expect /etc/x.json",
                                f"sh -c 'exit {status}'")
        done = subprocess.run(["sh", "-c", shell], capture_output=True, text=True)
        assert done.returncode == 0 and done.stdout.strip() == printed


def test_process_real_report_lines() -> None:
    fact = VerifyReport()
    fact.command("a", "b", node="h200-node")
    text = (DEVICE / "verify-report-h200.json").read_text()
    assert fact.process(text.splitlines()) == json.loads(text)


def test_process_without_report() -> None:
    fact = VerifyReport()
    fact.command("a", "b", node="gpu-09")
    report = fact.process(["verification agent did not run (is python3 installed?)"])
    assert report["node"] == "gpu-09" and report["status"] == "error"
    assert report["error"] == "agent printed no report: verification agent did not run (is python3 installed?)"
    assert fact.default()["error"] == "the verification agent printed nothing"
