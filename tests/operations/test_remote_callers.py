"""Each command run outside an operation's yield fails naming the command, its exit status and its last lines:
diagnose, the verify command and the rollout's node commands (the run lock and the join: their own tests)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from pyinfra.api import Config, Inventory, State

from gpu_provision.errors import GpuProvisionError
from gpu_provision.operations.remote import STATUS_MARK


def failing_host(monkeypatch: pytest.MonkeyPatch, stderr: list[str], data: dict[str, Any] | None = None) -> Any:
    """A pyinfra host (no connection) whose every command fails with ``stderr`` and exit status 3."""
    inventory = Inventory(([("gpu-01", data or {})], {}))
    state = State(inventory, Config())
    host = inventory.get_host("gpu-01")
    monkeypatch.setattr(host, "run_shell_command", lambda command, **kw: (
        False, SimpleNamespace(stdout_lines=[], stderr_lines=[*stderr, "", f"{STATUS_MARK}3"])))
    return state, host


def test_diagnose_names_the_failed_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_provision.commands import diagnose
    from gpu_provision.doctor import DoctorExpectations

    state, host = failing_host(monkeypatch, ["mktemp: permission denied"], {"_sudo": True, "_sudo_password": "pw"})
    monkeypatch.setattr(diagnose, "expectations_of", lambda target: DoctorExpectations())
    reached = SimpleNamespace(host=host, state=state, log=SimpleNamespace(last_failure=None))
    with pytest.raises(GpuProvisionError) as raised:
        diagnose.collect_host(reached, "/nonexistent", bug_report=False, timeout=5.0)
    assert str(raised.value) == ("cannot make a temporary folder: mktemp -d /tmp/gpu-provision-diagnose.XXXXXX "
                                 "exited 3: mktemp: permission denied")


def test_verify_reports_the_agent_command_status_and_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_provision.verify import collect
    from gpu_provision.verify.report import report_from_run

    state, host = failing_host(monkeypatch, ["Traceback (most recent call last):", "OSError: disk full"])
    ran = collect._run(SimpleNamespace(host=host, state=state), "python3 /var/lib/agent.pyz verify")
    report = report_from_run("gpu-01", ran)
    assert report["error"] == ("agent run failed: python3 /var/lib/agent.pyz verify exited 3: "
                               "Traceback (most recent call last): / OSError: disk full")


def test_the_rollouts_node_commands_and_deploy_name_what_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_provision.rollout import execute

    state, host = failing_host(monkeypatch, ["docker: not found"])
    node = execute.RemoteNode(SimpleNamespace(host=host, state=state))  # type: ignore[arg-type]
    with pytest.raises(GpuProvisionError) as raised:
        node.gpu_containers()
    assert str(raised.value).startswith("cannot list the containers: ")
    assert str(raised.value).endswith(" exited 3: docker: not found")
    log = SimpleNamespace(failed_operation="Install the driver", last_failure="apt-get install x exited 100: E: no")
    deploy = execute.RemoteNode(SimpleNamespace(log=log))  # type: ignore[arg-type]
    assert deploy._deploy_failure() == "the deploy failed at Install the driver: apt-get install x exited 100: E: no"
