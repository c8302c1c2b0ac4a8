"""The agent run operation: the command it runs (with the operation's sudo), no change counted, and the report
read back from its result."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

from pyinfra.api.operation import OperationMeta
from pyinfra.connectors.util import CommandOutput, OutputLine
from pyinfra.context import ctx_host

from gpu_provision.operations.remote import STATUS_MARK
from gpu_provision.operations.verify import agent_command, agent_report
from gpu_provision.verify.agentrun import AgentRun
from gpu_provision.verify.report import NOT_RUN, report_from_run, schema_problems

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
    # Exit 1 (a check failed) and 2 (agent error) count as success for the operation; any other status (127: no
    # python3) is the command's own, for its failure to name.
    for status, returned in ((0, 0), (1, 0), (2, 0), (3, 3), (127, 127)):
        shell = command.replace("python3 '/var/lib/gpu provision/gpu-provision-node.pyz' verify --expect /etc/x.json",
                                f"sh -c 'exit {status}'")
        done = subprocess.run(["sh", "-c", shell], capture_output=True, text=True)
        assert (done.returncode, done.stdout) == (returned, "")


class RecordingHost:
    """A host for the operation's body: records the commands it is asked to run and their connector arguments;
    each one prints ``stdout`` (and ``stderr``) and exits ``status``, reported as the node's shell reports it."""

    def __init__(self, executing: bool, stdout: str = "{}", status: int = 0, stderr: tuple[str, ...] = ()):
        self.executing_op_hash = "op" if executing else None
        self.calls: list[tuple[str, dict]] = []
        self.stdout = stdout
        self.status = status
        self.stderr = stderr
        global_arguments = {"_sudo": True, "_sudo_user": "root", "_timeout": 30, "_if": [], "name": "x"}
        self.state = SimpleNamespace(print_output=False, print_input=False, failed_hosts=set(), active_hosts={self},
                                     ops={self: {"op": SimpleNamespace(global_arguments=global_arguments)}})

    def run_shell_command(self, command, **kwargs):
        self.calls.append((str(command), kwargs))
        lines = [OutputLine("stdout", self.stdout)] if self.stdout else []
        lines += [OutputLine("stderr", line) for line in (*self.stderr, "", f"{STATUS_MARK}{self.status}")]
        return self.status == 0, CommandOutput(lines)


def body(host: RecordingHost, judge=None) -> tuple[list, AgentRun]:
    """Run the operation's generator on ``host``; what it yields and the run it filled."""
    run = AgentRun()
    with ctx_host.use(host):
        return list(agent_report._inner("/opt/a.pyz", "/opt/e.json", run, judge)), run


def test_operation_runs_exactly_the_agent_command_with_the_operations_sudo_and_yields_no_change() -> None:
    planning = RecordingHost(executing=False)
    assert body(planning) == ([], AgentRun()) and planning.calls == []
    executing = RecordingHost(executing=True, stdout='{"status": "pass"}')
    yielded, run = body(executing)
    assert yielded == []
    (command, kwargs), = executing.calls
    assert command == agent_command("/opt/a.pyz", "/opt/e.json")
    assert (kwargs["_sudo"], kwargs["_sudo_user"], kwargs["_timeout"]) == (True, "root", 30)
    assert "_if" not in kwargs and "name" not in kwargs
    assert (run.is_complete(), run.did_succeed(), run.stdout) == (True, True, '{"status": "pass"}')


def test_an_agent_command_that_exits_above_2_is_reported_with_the_command_and_its_status() -> None:
    """No python3 on the node: the report names the command that ran, its exit status and what it printed."""
    missing = RecordingHost(executing=True, stdout="", status=127, stderr=("sh: 1: python3: not found",))
    _, run = body(missing)
    report = report_from_run("gpu-09", run)
    assert report["status"] == "error" and schema_problems(report) == []
    assert report["error"] == ("agent run failed: python3 /opt/a.pyz verify --expect /opt/e.json || { s=$?; "
                               '[ "$s" -le 2 ] || exit... exited 127: sh: 1: python3: not found')


def test_a_node_judged_bad_is_marked_failed_without_a_failing_command() -> None:
    """No command that fails (pyinfra would print "Error: executed 0 commands"): the host is marked failed and stays
    in the run, so the deploy's later operations (the run lock's release) still reach it."""
    heard: list[AgentRun] = []
    bad = RecordingHost(executing=True)
    yielded, run = body(bad, judge=lambda host, ran: heard.append(ran) or False)
    assert yielded == [] and heard == [run]
    assert bad.state.failed_hosts == {bad} and bad.state.active_hosts == {bad}
    good = RecordingHost(executing=True)
    assert body(good, judge=lambda host, ran: True)[0] == []
    assert good.state.failed_hosts == set() and good.state.active_hosts == {good}


def test_a_converged_node_plans_and_runs_the_agent_with_no_change(tmp_path: Path) -> None:
    """Through pyinfra's API on @local: no change in the plan, none in the results, the output kept."""
    from pyinfra.api import Config, Inventory, State
    from pyinfra.api.connect import connect_all
    from pyinfra.api.operation import add_op
    from pyinfra.api.operations import run_ops

    agent = tmp_path / "agent.py"
    agent.write_text('import json; print(json.dumps({"status": "pass"}))\n')
    state = State(Inventory((["@local"], {})), Config(), check_for_changes=True)
    connect_all(state)
    run = AgentRun()
    ops = add_op(state, agent_report, agent_path=str(agent), expect_path="/dev/null", ran=run)
    (meta,) = ops.values()
    assert meta._maybe_is_change is False and not run.is_complete()
    run_ops(state)
    assert meta.did_succeed() and not meta.did_change()
    assert json.loads(run.stdout) == {"status": "pass"}


def test_process_real_report_lines() -> None:
    text = (DEVICE / "verify-report-h200.json").read_text()
    assert report_from_run("h200-node", ran(text)) == json.loads(text)


def test_process_without_report() -> None:
    report = report_from_run("gpu-09", ran("gpu-provision: no report today"))
    assert report["node"] == "gpu-09" and report["status"] == "error"
    assert report["error"] == "agent printed no report: gpu-provision: no report today"
    assert report_from_run("gpu-09", ran(""))["error"] == "the verification agent printed nothing"


def test_agent_that_never_ran_or_failed_gives_an_error_report() -> None:
    never = report_from_run("gpu-09", OperationMeta("hash", is_change=True))
    assert never["error"] == NOT_RUN
    assert never["error"] == ("the verification agent did not run: an operation before it failed on this node; fix "
                              "that operation's error, printed under its name, and run again")
    failed = report_from_run("gpu-09", ran(success=False, stderr="Connection reset\nsocket closed"))
    assert failed["error"] == "agent run failed: socket closed"
    assert schema_problems(never) == [] and schema_problems(failed) == []
