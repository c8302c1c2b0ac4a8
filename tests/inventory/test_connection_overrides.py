"""pyinfra's own overrides (``group_data/``, host data, ``--data``, ``--user``, ``--sudo``) outrank the cluster
file's connection settings, which reach hosts as the defaults a pyinfra inventory would give them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.arguments import pop_global_arguments
from pyinfra.context import ctx_state
from pyinfra_cli.inventory import make_inventory_from_files

from gpu_provision.inventory import node_for

ROOT = Path(__file__).resolve().parents[2]

CLUSTER = """\
version: v1
cluster:
  name: t
  ssh: {user: ops, port: 2200, key: id_ops}
nodes:
  - {name: a, address: 127.0.0.1, role: control-plane}
  - {name: b, address: 127.0.0.2, role: worker, ssh: {user: root, port: 2201}}
"""


def _cluster(tmp_path: Path, text: str = CLUSTER, **group_data: str) -> Path:
    """A loopback cluster file in ``tmp_path`` and a ``group_data/<group>.py`` per keyword."""
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    for group, body in group_data.items():
        (tmp_path / "group_data").mkdir(exist_ok=True)
        (tmp_path / "group_data" / f"{group}.py").write_text(body)
    return path


def _inventory(monkeypatch, tmp_path: Path, override_data: dict | None = None) -> Inventory:
    """The inventory ``pyinfra inventory.py`` builds from ``tmp_path`` (its group_data/ included)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(tmp_path / "cluster.yaml"))
    with ctx_state.use(State(inventory=Inventory(([], {})), config=Config())):
        return make_inventory_from_files(str(ROOT / "inventory.py"), override_data, cwd=str(tmp_path))


def _connection(inventory: Inventory, name: str) -> dict:
    data = inventory.get_host(name).data
    return {key: data.get(key) for key in ("ssh_hostname", "ssh_user", "ssh_port", "ssh_key", "_sudo")}


def test_cluster_settings_are_the_all_groups_data_and_a_nodes_own_are_host_data(monkeypatch, tmp_path) -> None:
    _cluster(tmp_path)
    inventory = _inventory(monkeypatch, tmp_path)
    key = str(tmp_path / "id_ops")
    assert _connection(inventory, "a") == {"ssh_hostname": "127.0.0.1", "ssh_user": "ops", "ssh_port": 2200,
                                           "ssh_key": key, "_sudo": True}
    # A node logging in as root turns the cluster's sudo off again.
    assert _connection(inventory, "b") == {"ssh_hostname": "127.0.0.2", "ssh_user": "root", "ssh_port": 2201,
                                           "ssh_key": key, "_sudo": False}
    assert inventory.get_data()["ssh_user"] == "ops"
    assert "ssh_user" not in inventory.get_host_data("a")
    assert {k: inventory.get_host_data("b")[k] for k in ("ssh_user", "ssh_port", "_sudo")} == \
        {"ssh_user": "root", "ssh_port": 2201, "_sudo": False}


def test_group_data_all_overrides_the_cluster_ssh_settings(monkeypatch, tmp_path) -> None:
    _cluster(tmp_path, all='ssh_user = "deploy"\nssh_key = "/keys/deploy"\n')
    inventory = _inventory(monkeypatch, tmp_path)
    assert _connection(inventory, "a") == {"ssh_hostname": "127.0.0.1", "ssh_user": "deploy", "ssh_port": 2200,
                                           "ssh_key": "/keys/deploy", "_sudo": True}
    # What a node's own ssh: sets is host data, which outranks group data in pyinfra too.
    assert _connection(inventory, "b")["ssh_user"] == "root"


def test_group_data_of_a_generated_group_overrides_the_cluster_file(monkeypatch, tmp_path) -> None:
    _cluster(tmp_path, control_plane="ssh_port = 2022\n_sudo = False\n")
    inventory = _inventory(monkeypatch, tmp_path)
    assert _connection(inventory, "a")["ssh_port"] == 2022 and _connection(inventory, "a")["_sudo"] is False
    assert _connection(inventory, "b")["ssh_port"] == 2201


def test_override_data_outranks_cluster_node_and_group_data(monkeypatch, tmp_path) -> None:
    """``--data``, ``--user``, ``--port`` and ``--key`` land in pyinfra's override data."""
    _cluster(tmp_path, all='ssh_user = "deploy"\n')
    inventory = _inventory(monkeypatch, tmp_path, {"ssh_user": "alice", "ssh_port": 2222, "ssh_key": "/k"})
    for name in ("a", "b"):
        assert {k: v for k, v in _connection(inventory, name).items() if k != "_sudo"} == {
            "ssh_hostname": f"127.0.0.{'ab'.index(name) + 1}", "ssh_user": "alice", "ssh_port": 2222, "ssh_key": "/k"}


def test_node_settings_stay_from_the_cluster_file(monkeypatch, tmp_path) -> None:
    """Only connection settings are pyinfra's to override; the GPU stack and roles are the cluster file's."""
    _cluster(tmp_path, all='ssh_user = "deploy"\n')
    inventory = _inventory(monkeypatch, tmp_path, {"ssh_user": "alice"})
    node = node_for(inventory.get_host("a"))
    assert (node.role, node.address, node.ssh.user) == ("control-plane", "127.0.0.1", "ops")


@pytest.mark.parametrize(("config_sudo", "expected"), [(True, True), (False, False)])
def test_pyinfra_sudo_reaches_a_cluster_that_logs_in_as_root(monkeypatch, tmp_path, config_sudo, expected) -> None:
    """``pyinfra --sudo`` sets the config; data outranks config, so a root login must leave ``_sudo`` unset."""
    _cluster(tmp_path, CLUSTER.replace("user: ops, ", "").replace("ssh: {user: root, port: 2201}", "ssh: {port: 2201}"))
    inventory = _inventory(monkeypatch, tmp_path)
    state = State(inventory=inventory, config=Config(SUDO=config_sudo))
    for host in inventory:
        assert host.data.get("_sudo") is None
        arguments, _ = pop_global_arguments(state, host, {})
        assert arguments["_sudo"] is expected


def _debug_inventory(tmp_path: Path, *options: str) -> dict[str, str]:
    """``pyinfra inventory.py OPTIONS debug-inventory`` in ``tmp_path``: each host's printed section by name."""
    env = {**os.environ, "GPU_PROVISION_CLUSTER": str(tmp_path / "cluster.yaml")}
    proc = subprocess.run([sys.executable, "-m", "pyinfra", str(ROOT / "inventory.py"), *options, "debug-inventory"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    a, b = (proc.stdout + proc.stderr).split("[a]", 1)[1].split("[b]", 1)
    return {"a": a, "b": b}


def test_debug_inventory_shows_group_data_user_and_data_overrides(tmp_path) -> None:
    """The pyinfra command itself, on a loopback cluster file: debug-inventory prints and connects to nothing."""
    _cluster(tmp_path, all='ssh_user = "deploy"\n')
    hosts = _debug_inventory(tmp_path)
    assert '"ssh_user": "deploy"' in hosts["a"] and '"ssh_user": "root"' in hosts["b"]
    hosts = _debug_inventory(tmp_path, "--user", "alice", "--data", "ssh_key=/keys/alice")
    for name, port in (("a", 2200), ("b", 2201)):
        assert '"ssh_user": "alice"' in hosts[name] and '"ssh_key": "/keys/alice"' in hosts[name]
        assert f'"ssh_port": {port}' in hosts[name]
    hosts = _debug_inventory(tmp_path, "--data", "ssh_port=2222")
    assert all('"ssh_port": 2222' in section for section in hosts.values())
