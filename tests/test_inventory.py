"""inventory.py through pyinfra's own inventory loading."""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.context import ctx_state
from pyinfra_cli.inventory import make_inventory_from_files

from gpu_provision.errors import GpuProvisionError
from gpu_provision.inventory import node_for
from gpu_provision.spec import cluster_file_from_env

ROOT = Path(__file__).resolve().parents[1]
#: Documentation-only networks (RFC 5737 and RFC 3849): the only addresses example files may name.
DOCUMENTATION = [ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")]


def _inventory(monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(ROOT / "inventory" / "cluster.yaml"))
    # pyinfra's CLI loads inventory files inside a State context; do the same.
    state = State(inventory=Inventory(([], {})), config=Config())
    with ctx_state.use(state):
        return make_inventory_from_files(str(ROOT / "inventory.py"))


def test_pyinfra_loads_hosts_groups_and_data(monkeypatch) -> None:
    inventory = _inventory(monkeypatch)
    names = sorted(h.name for h in inventory)
    assert names == ["a100-01", "cp-01", "h200-01", "l40s-01", "vgpu-01"]
    assert [h.name for h in inventory.get_group("control_plane")] == ["cp-01"]
    assert sorted(h.name for h in inventory.get_group("gpu_h200")) == ["h200-01"]
    assert sorted(h.name for h in inventory.get_group("group_l40s_shared")) == ["l40s-01"]
    host = inventory.get_host("h200-01")
    assert host.data.ssh_hostname == "192.0.2.21"
    assert host.data.gpu_provision_node["gpus"] == {"model": "H200", "count": 8}
    assert node_for(host).mig.planned[0].placements[0].profile == "2g.35gb"


def test_debug_inventory_lists_hosts() -> None:
    env = {**os.environ, "GPU_PROVISION_CLUSTER": "inventory/cluster.yaml"}
    proc = subprocess.run([sys.executable, "-m", "pyinfra", "inventory.py", "debug-inventory"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for name in ("cp-01", "h200-01", "a100-01", "l40s-01", "vgpu-01"):
        assert f"[{name}]" in proc.stdout + proc.stderr


def test_invalid_cluster_stops_before_any_connection(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: v1\ncluster: {name: t}\nnodes:\n  - {name: a, address: 127.0.0.1, role: boss}\n")
    env = {**os.environ, "GPU_PROVISION_CLUSTER": str(bad)}
    proc = subprocess.run([sys.executable, "-m", "pyinfra", "inventory.py", "exec", "--", "true"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert f"{bad}:4:" in proc.stderr and "$.nodes[0].role" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "Connecting" not in proc.stdout + proc.stderr


def test_without_a_cluster_file_the_inventory_says_how_to_name_one(tmp_path: Path) -> None:
    """No GPU_PROVISION_CLUSTER and no ./cluster.yaml: exit 2 and one line, never the example file's machines."""
    env = {k: v for k, v in os.environ.items() if k != "GPU_PROVISION_CLUSTER"}
    proc = subprocess.run([sys.executable, "-m", "pyinfra", str(ROOT / "inventory.py"), "debug-inventory"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "no cluster file: set GPU_PROVISION_CLUSTER=FILE" in proc.stderr and "gpu-provision init" in proc.stderr
    assert "Traceback" not in proc.stderr and "192.0.2." not in proc.stdout + proc.stderr


def test_cluster_file_from_env_order(tmp_path: Path, monkeypatch) -> None:
    """GPU_PROVISION_CLUSTER first, then ./cluster.yaml (the `gpu-provision init` layout), then an error."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GPU_PROVISION_CLUSTER", raising=False)
    with pytest.raises(GpuProvisionError, match="no cluster file"):
        cluster_file_from_env()
    (tmp_path / "cluster.yaml").write_text("version: v1\n")
    assert cluster_file_from_env() == "cluster.yaml"
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", "elsewhere.yaml")
    assert cluster_file_from_env() == "elsewhere.yaml"


def test_example_files_use_documentation_addresses_only() -> None:
    """Example cluster files name no real machine: RFC 5737 addresses, and a comment saying so."""
    example = (ROOT / "inventory" / "cluster.yaml").read_text()
    addresses = re.findall(r"^\s*address: (\S+)", example, flags=re.M)
    assert addresses and all(any(ipaddress.ip_address(a) in n for n in DOCUMENTATION) for a in addresses), addresses
    assert "documentation-only addresses (RFC 5737" in example
