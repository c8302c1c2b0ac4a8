"""inventory.py through pyinfra's own inventory loading."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pyinfra.api import Config, Inventory, State
from pyinfra.context import ctx_state
from pyinfra_cli.inventory import make_inventory_from_files

from gpu_provision.inventory import node_for

ROOT = Path(__file__).resolve().parents[1]


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
    assert host.data.ssh_hostname == "10.20.0.21"
    assert host.data.gpu_provision_node["gpus"] == {"model": "H200", "count": 8}
    assert node_for(host).mig.layouts[0].placements[0].profile == "2g.35gb"


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
