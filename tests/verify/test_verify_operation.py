"""The agent run operation: the command it sends, and the report read back from its result."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from pyinfra.api.operation import OperationMeta
from pyinfra.connectors.util import CommandOutput, OutputLine

from gpu_provision.operations.verify import NOT_RUN, agent_command, agent_report
from gpu_provision.verify.report import report_from_run, schema_problems

DEVICE = Path(__file__).resolve().parents[1] / "fixtures" / "device"


def ran(stdout: str = "", success: bool = True, stderr: str = "") -> OperationMeta:
    """The result of an agent run that printed ``stdout`` (and ``stderr``)."""
    meta = OperationMeta("hash", is_change=True)
    lines = [OutputLine("stdout", line) for line in stdout.splitlines()]
    lines += [OutputLine("stderr", line) for line in stderr.splitlines()]
    meta.set_complete(success, ["python3 ..."], CommandOutput(lines))
    return meta


def test_command_quotes_paths_and_survives_failing_checks() -> None:
    command = agent_command("/var/lib/gpu provision/gpu-provision-node.pyz", "/etc/x.json")
    assert command.startswith("python3 '/var/lib/gpu provision/gpu-provision-node.pyz' verify --expect /etc/x.json")
    # Exit 1 (a check failed) and 2 (agent error) count as success for the operation; 127 prints a message.
    for status, printed in ((0, ""), (1, ""), (2, ""), (127, "verification agent did not run (is python3 installed?)")):
        shell = command.replace("python3 '/var/lib/gpu provision/gpu-provision-node.pyz' verify --expect /etc/x.json",
                                f"sh -c 'exit {status}'")
        done = subprocess.run(["sh", "-c", shell], capture_output=True, text=True)
        assert done.returncode == 0 and done.stdout.strip() == printed


def test_operation_runs_exactly_the_agent_command() -> None:
    assert list(agent_report._inner("/opt/a.pyz", "/opt/e.json")) == [agent_command("/opt/a.pyz", "/opt/e.json")]


def test_process_real_report_lines() -> None:
    text = (DEVICE / "verify-report-h200.json").read_text()
    assert report_from_run("h200-node", ran(text)) == json.loads(text)


def test_process_without_report() -> None:
    report = report_from_run("gpu-09", ran(NOT_RUN))
    assert report["node"] == "gpu-09" and report["status"] == "error"
    assert report["error"] == "agent printed no report: verification agent did not run (is python3 installed?)"
    assert report_from_run("gpu-09", ran(""))["error"] == "the verification agent printed nothing"


def test_agent_that_never_ran_or_failed_gives_an_error_report() -> None:
    never = report_from_run("gpu-09", OperationMeta("hash", is_change=True))
    assert never["error"] == "an operation before the agent failed (see the log)"
    failed = report_from_run("gpu-09", ran(success=False, stderr="Connection reset\nsocket closed"))
    assert failed["error"] == "agent run failed: socket closed"
    assert schema_problems(never) == [] and schema_problems(failed) == []
