"""The join's own remote commands run with the connector arguments pyinfra gives the join operation on each host.

pyinfra runs the ``run_shell_command`` calls of a function command with no connector arguments at all, so without
them a login user other than root would run ``kubeadm token create`` and ``kubeadm join`` without sudo. These tests
build a real pyinfra state (no connection is made) whose hosts log in as a sudo user, one with a sudo password.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.operation import add_op
from pyinfra.operations import server

from gpu_provision.operations.commands import connector_arguments
from gpu_provision.operations.kubernetes import membership
from gpu_provision.spec.model import Cluster

TOKEN = "abcdef.0123456789abcdef"
JOIN_LINE = f"kubeadm join 10.77.0.11:6443 --token {TOKEN} --discovery-token-ca-cert-hash sha256:{'ab' * 32}"


def sudo_state(config: Config | None = None) -> tuple[State, Any, Any]:
    """A state with control plane ``cp-01`` (sudo with a password) and worker ``h200-01`` (passwordless sudo)."""
    inventory = Inventory(([("cp-01", {"ssh_user": "ops", "_sudo": True, "_sudo_password": "secret"}),
                            ("h200-01", {"ssh_user": "ops", "_sudo": True})], {}))
    state = State(inventory, config or Config())
    for host in inventory:
        state.activate_host(host)  # as if connected: operations are planned for active hosts only
    return state, inventory.get_host("cp-01"), inventory.get_host("h200-01")


def one_operation(state: State, **arguments: Any) -> str:
    """Plan one operation on every host, as a deploy file does; its hash (the same on all)."""
    add_op(state, server.shell, "true", **arguments)
    (op_hash,) = {host.op_hash_order[-1] for host in state.inventory}
    return op_hash


def recorder(host: Any, replies: dict[str, tuple[bool, list[str]]]) -> list[tuple[str, dict[str, Any]]]:
    """Replace ``host``'s ``run_shell_command`` by one that records each command with its keyword arguments."""
    ran: list[tuple[str, dict[str, Any]]] = []

    def run_shell_command(command: Any, **kwargs: Any) -> tuple[bool, Any]:
        ran.append((str(command), kwargs))
        for prefix, (ok, stdout) in replies.items():
            if str(command).startswith(prefix):
                return ok, SimpleNamespace(stdout_lines=stdout, stderr_lines=[])
        return True, SimpleNamespace(stdout_lines=[], stderr_lines=[])

    host.run_shell_command = run_shell_command
    return ran


def test_arguments_are_the_operations_on_each_host() -> None:
    state, control, worker = sudo_state()
    worker.executing_op_hash = one_operation(state, _timeout=30)
    on_control = connector_arguments(state, control, worker.executing_op_hash)
    on_worker = connector_arguments(state, worker, worker.executing_op_hash)
    assert (on_control["_sudo"], on_control["_sudo_password"], on_control["_timeout"]) == (True, "secret", 30)
    assert (on_worker["_sudo"], on_worker["_sudo_password"], on_worker["_timeout"]) == (True, None, 30)
    assert "_ignore_errors" not in on_worker  # an operation argument, not the connector's


def test_outside_an_operation_a_host_gets_its_data_and_config() -> None:
    config = Config()
    config.SUDO_USER = "admin"
    state, control, worker = sudo_state(config)
    on_control = connector_arguments(state, control, worker.executing_op_hash)
    assert (on_control["_sudo"], on_control["_sudo_password"], on_control["_sudo_user"]) == (True, "secret", "admin")


def test_join_runs_every_command_with_its_hosts_arguments(example: Cluster) -> None:
    state, control, worker = sudo_state()
    worker.executing_op_hash = one_operation(state)
    on_control = recorder(control, {"kubeadm token create": (True, [JOIN_LINE])})
    on_worker = recorder(worker, {})
    assert membership.do_join(state, worker, example, example.node("h200-01"), "cp-01", None) is True
    ((token_command, token_kwargs),) = on_control
    assert token_command.startswith("kubeadm token create")
    assert (token_kwargs["_sudo"], token_kwargs["_sudo_password"]) == (True, "secret")
    ((join_command, join_kwargs),) = on_worker
    assert join_command == membership.join_script() and join_kwargs["_sudo"] is True
    assert json.loads(join_kwargs["_stdin"])["discovery"]["bootstrapToken"]["token"] == TOKEN


def test_a_control_plane_outside_the_run_is_named_not_a_traceback(example: Cluster) -> None:
    """Seen on the rig: ``pyinfra ... --limit rig-mig`` left the control plane unconnected and the join ended in
    an AssertionError traceback from pyinfra's ssh connector."""
    state, control, worker = sudo_state()
    state.activated_hosts.discard(control)
    worker.executing_op_hash = one_operation(state)
    logs: list[str] = []
    worker.log_styled = lambda message, **_: logs.append(message)
    on_control = recorder(control, {})
    assert membership.do_join(state, worker, example, example.node("h200-01"), "cp-01", None) is False
    assert on_control == []
    assert logs == ["join: control plane cp-01 is not part of this run: add --limit cp-01 (it makes the join token)"]


@pytest.mark.parametrize("data", [{}, {"_sudo": False}])
def test_a_root_login_gets_no_sudo(data: dict[str, Any]) -> None:
    inventory = Inventory(([("cp-01", {"ssh_user": "root", **data})], {}))
    state = State(inventory, Config())
    host = inventory.get_host("cp-01")
    assert connector_arguments(state, host, host.executing_op_hash)["_sudo"] is False
