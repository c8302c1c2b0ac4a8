"""The cluster file's timeouts reach every command: each operation a deploy adds carries ``ssh.command_timeout`` as
pyinfra's ``_timeout`` global argument (unless pyinfra's own ``_timeout`` data is given), and the probe carries
``ssh.probe_timeout`` as its command's ``_timeout`` and a budget for the node-side probe.

The deploy is prepared through pyinfra's API on ``@local`` (prepare only: the probe reads this machine, nothing is
executed), as ``GPU_PROVISION_NODE=gpu-01 pyinfra @local deploys/gpu_node.py --dry`` would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.deploy import add_deploy
from pyinfra.context import ctx_config

from gpu_provision import inventory as gp_inventory
from gpu_provision.facts import state as facts_state
from gpu_provision.stages import pipeline
from gpu_provision.state import Request

ONE_NODE = """\
version: v1
cluster:
  name: local
  kubernetes: {{enabled: false}}
  ssh: {{command_timeout: {command}, probe_timeout: {probe}, connect_timeout: 23}}
nodes:
  - name: gpu-01
    address: 127.0.0.1
    gpus: {{model: H200, count: 8}}
"""


@pytest.fixture
def local_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(ONE_NODE.format(command=777, probe=40))
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(cluster))
    monkeypatch.setenv("GPU_PROVISION_NODE", "gpu-01")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(gp_inventory, "_CACHE", {})
    return cluster


def _prepared(data: dict[str, Any], probes: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch,
              deploy: Any = None) -> tuple[State, Any]:
    inventory = Inventory((["@local"], data))
    state = State(inventory, Config())
    connect_all(state)
    (host,) = list(inventory)
    real = host.get_fact

    def get_fact(cls: Any, *args: Any, **kwargs: Any) -> Any:
        if cls is facts_state.NodeState:
            probes.append(kwargs)
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(host, "get_fact", get_fact)
    if deploy is None:
        add_deploy(state, pipeline.gpu_node, stages=("preflight", "driver"))
    else:
        add_deploy(state, deploy)
    return state, host


def _timeouts(state: State, host: Any) -> set[Any]:
    return {state.get_op_data_for_host(host, op_hash).global_arguments["_timeout"] for op_hash in host.op_hash_order}


def test_every_deploy_operation_and_the_probe_carry_the_cluster_files_timeouts(
        local_node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    probes: list[dict[str, Any]] = []
    state, host = _prepared({}, probes, monkeypatch)
    assert len(host.op_hash_order) > 5
    assert _timeouts(state, host) == {777}
    # The probe: its own, shorter bound on the command, and four fifths of it as the node-side budget.
    assert probes and all(p == {"budget": 32.0, "_timeout": 40} for p in probes)


def test_pyinfras_own_timeout_data_outranks_the_cluster_file(local_node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    probes: list[dict[str, Any]] = []
    state, host = _prepared({"_timeout": 90}, probes, monkeypatch)
    assert _timeouts(state, host) == {90}
    assert probes and all(p == {"budget": 72.0, "_timeout": 90} for p in probes)


def test_the_probe_command_sends_its_budget_to_the_node() -> None:
    request = Request(packages={"bash"})
    command = facts_state.NodeState().command(request.to_json(), False, 32.0)
    assert '"budget": 32.0' in command
    assert '"budget"' not in facts_state.NodeState().command(request.to_json())


def test_the_pyinfra_command_connects_with_the_cluster_files_timeout(local_node: Path) -> None:
    """pyinfra's command loads config.py into its config, then the inventory with that config in context."""
    config = Config()
    with ctx_config.use(config):
        gp_inventory.groups(str(local_node))
    assert config.CONNECT_TIMEOUT == 23
    # A CONNECT_TIMEOUT from config.py (or --config) stays: pyinfra's own settings outrank the cluster file's.
    config = Config(CONNECT_TIMEOUT=5)
    with ctx_config.use(config):
        gp_inventory.groups(str(local_node))
    assert config.CONNECT_TIMEOUT == 5


def test_the_verification_deploy_on_its_own_carries_the_command_timeout(
        local_node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_provision.deploys.verify import verify

    state, host = _prepared({}, [], monkeypatch, deploy=verify)
    assert host.op_hash_order and _timeouts(state, host) == {777}


def test_fleet_commands_leave_each_command_its_cluster_file_bound_unless_told() -> None:
    """drift and rollout used to set 120 s as every host's ``_timeout`` data, which outranked the cluster file's
    ``ssh.probe_timeout`` (and bounded a rollout's package installs by it)."""
    from gpu_provision.fleet import settings_from

    assert settings_from(None).command_timeout is None
    assert settings_from(None, command_timeout=30).command_timeout == 30
