"""The one host-command helper: exit status, output tails, redaction, stdin, timeout and sudo arguments, and the
fleet's command log that tells a failed command the same way. A fake host runs each command here with ``sh``, as
the node's shell would run it."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace
from typing import Any

from pyinfra.api import Inventory, StringCommand
from pyinfra.connectors.util import CommandOutput, OutputLine
from pyinfra.operations import server

from gpu_provision import hostcommand
from gpu_provision.fleet import FleetSettings, Reached, run_fleet
from gpu_provision.operations.remote import STATUS_MARK, run_on_host, without_status

TOKEN = "abcdef.0123456789abcdef"


class ShellHost:
    """Runs each command's raw text with ``sh`` here (stdin from ``_stdin``), keeping the keyword arguments."""

    def __init__(self, global_arguments: dict[str, Any] | None = None, raises: Exception | None = None) -> None:
        self.executing_op_hash = "op"
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.raises = raises
        self.state = SimpleNamespace(ops={self: {"op": SimpleNamespace(global_arguments=global_arguments or {})}})

    def run_shell_command(self, command: Any, **kwargs: Any) -> tuple[bool, Any]:
        self.calls.append((str(command), kwargs))
        if self.raises is not None:
            raise self.raises
        done = subprocess.run(["sh", "-c", command.get_raw_value()], input=kwargs.get("_stdin") or "",
                              capture_output=True, text=True, check=False)
        return done.returncode == 0, SimpleNamespace(stdout_lines=done.stdout.splitlines(),
                                                     stderr_lines=done.stderr.splitlines())


def test_exit_status_output_and_the_one_failure_wording() -> None:
    ran = run_on_host(ShellHost(), "echo out; echo err >&2; exit 3")
    assert (ran.ok, ran.exit_status, ran.stdout, ran.stderr) == (False, 3, "out", "err")
    assert ran.tail == ("out", "err")
    assert ran.failure == "echo out; echo err >&2; exit 3 exited 3: out / err"
    ok = run_on_host(ShellHost(), "echo fine")
    assert (ok.ok, ok.exit_status, ok.stdout_lines, ok.stderr_lines) == (True, 0, ["fine"], [])


def test_an_exit_inside_the_command_ends_only_it_and_its_status_is_kept() -> None:
    ran = run_on_host(ShellHost(), "false || exit 42\necho never")
    assert ran.exit_status == 42 and STATUS_MARK not in ran.stderr and ran.stdout == ""
    assert ran.failure == "false || exit 42... exited 42: no output"  # the command's first line


def test_the_tail_is_the_last_lines_and_long_commands_are_shortened() -> None:
    ran = run_on_host(ShellHost(), "for i in 1 2 3 4 5 6 7; do echo line$i >&2; done; exit 1 # " + "x" * 100)
    assert ran.tail == ("line3", "line4", "line5", "line6", "line7")
    assert ran.command.endswith("...") and len(ran.command) == hostcommand.COMMAND_CHARS + 3


def test_the_sudo_password_never_appears() -> None:
    host = ShellHost({"_sudo": True, "_sudo_password": "hunter2"})
    ran = run_on_host(host, "echo hunter2; echo 'sudo: hunter2 is wrong' >&2; exit 1")
    assert "hunter2" not in ran.stdout + ran.stderr + ran.failure + ran.command + repr(ran)
    assert ran.failure.endswith("exited 1: *** / sudo: *** is wrong")
    assert host.calls[0][1]["_sudo_password"] == "hunter2"  # it still reaches the connector


def test_secrets_are_hidden_in_the_command_and_the_tail_but_stdout_stays_parseable() -> None:
    ran = run_on_host(ShellHost(), f"echo kubeadm join --token {TOKEN}; echo password=abc >&2; exit 2")
    assert TOKEN in ran.stdout  # the caller parses it (a join command's token)
    assert TOKEN not in ran.failure and "abc" not in ran.failure
    assert ran.tail == ("kubeadm join --token ***", "password=***")
    literal = run_on_host(ShellHost(), "echo s3cr3t-value >&2; exit 1", secrets=["s3cr3t-value"])
    assert literal.failure.endswith("exited 1: ***")


def test_stdin_timeout_and_the_operations_connector_arguments() -> None:
    host = ShellHost({"_sudo": True, "_sudo_user": "admin", "_timeout": 30, "name": "not a connector argument"})
    ran = run_on_host(host, "cat", stdin="hello\n", timeout=7)
    assert ran.stdout == "hello"
    (command, kwargs), = host.calls
    assert command == "cat"  # printed and logged as given
    assert kwargs == {"print_output": False, "print_input": False, "_sudo": True, "_sudo_user": "admin",
                      "_timeout": 7, "_stdin": "hello\n"}
    given = ShellHost()
    run_on_host(given, "true", {"_sudo": True, "_sudo_user": "ops"})
    assert given.calls[0][1] == {"print_output": False, "print_input": False, "_sudo": True, "_sudo_user": "ops"}


def test_a_timeout_or_a_dropped_connection_is_a_result() -> None:
    ran = run_on_host(ShellHost(raises=TimeoutError("timed out after 7s")), "sleep 60")
    assert (ran.ok, ran.exit_status, ran.error) == (False, None, "TimeoutError: timed out after 7s")
    assert ran.failure == "sleep 60 did not finish: TimeoutError: timed out after 7s"


def test_without_status_takes_the_report_off_pyinfras_output() -> None:
    output = CommandOutput([OutputLine("stdout", "ok"), OutputLine("stderr", "warn"), OutputLine("stderr", ""),
                            OutputLine("stderr", f"{STATUS_MARK}5")])
    status, rest = without_status(output)
    assert status == 5 and rest.stdout_lines == ["ok"] and rest.stderr_lines == ["warn"]
    assert without_status(SimpleNamespace(stdout_lines=[]))[0] is None


def test_the_fleet_log_tells_a_failed_command_with_its_status_and_tail() -> None:
    def work(reached: Reached) -> tuple[Any, ...]:
        ok, output = reached.host.run_shell_command(StringCommand("echo bad >&2; exit 4"))
        ran = run_on_host(reached.host, "echo fine; exit 6", {})
        return ok, list(output.stderr_lines), reached.log.last_failure, ran.exit_status, vars(reached.log)

    (result,) = run_fleet(Inventory((["@local"], {})), work, FleetSettings()).hosts
    ok, stderr, failure, status, log = result.value
    assert ok is False and stderr == ["bad"]  # the status report is not left in the output
    assert failure == "echo fine; exit 6 exited 6: fine" and status == 6
    assert "last_error" not in log  # one way to tell a failed command: last_failure


def test_a_failed_deploy_names_the_operation_and_how_its_command_failed() -> None:
    def work(reached: Reached) -> tuple[bool, str | None, str | None]:
        def deploy() -> None:
            server.shell(name="Break on purpose", commands=["echo broken >&2; exit 9"])
        _, ok = reached.apply(deploy)
        return ok, reached.log.failed_operation, reached.log.last_failure

    (result,) = run_fleet(Inventory((["@local"], {})), work, FleetSettings()).hosts
    assert result.value == (False, "Break on purpose", "echo broken >&2; exit 9 exited 9: broken")


def test_the_command_shown_is_its_first_line_with_secrets_hidden_before_the_cut() -> None:
    # The token starts before the 80th character and ends after it: hidden first, then cut, so no part of it shows.
    command = "x" * 70 + f" --token {TOKEN} --more\n" + "QUJD" * 2000 + "\npassword=later"
    shown = hostcommand.shorten(command, ["unused"])
    assert shown == ("x" * 70 + " --token ***")[:hostcommand.COMMAND_CHARS].rstrip() + "..."
    assert TOKEN[:4] not in shown and "QUJD" not in shown
    assert hostcommand.shorten("echo s3cr3t", ["s3cr3t"]) == "echo ***"
