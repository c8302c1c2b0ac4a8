"""``gpu-provision init DIR``: a starter cluster file generated from the settings, and the files pyinfra needs."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyinfra_cli.util import try_import_module_attribute

from gpu_provision import deploys
from gpu_provision.cli import main
from gpu_provision.commands.init import files
from gpu_provision.spec import load_cluster, starter

REPO = Path(__file__).resolve().parents[2]
WRITTEN = ("cluster.yaml", "inventory.py", "deploys/gpu_node.py")


def test_init_writes_a_valid_cluster_file_an_inventory_and_a_deploy(tmp_path: Path, capsys) -> None:
    site = tmp_path / "site"
    assert main(["init", str(site)]) == 0
    assert sorted(str(p.relative_to(site)) for p in site.rglob("*") if p.is_file()) == sorted(WRITTEN)
    cluster = load_cluster(site / "cluster.yaml")
    assert [(n.name, n.address, n.role) for n in cluster.nodes] == [("gpu-01", "192.0.2.10", "control-plane")]
    assert "documentation-only address (RFC 5737)" in (site / "cluster.yaml").read_text()
    out, err = capsys.readouterr()
    assert f"wrote {site / 'cluster.yaml'}" in err and out.startswith(f"next: cd {site}")


def test_init_under_json_prints_only_json(tmp_path: Path, capsys) -> None:
    assert main(["init", str(tmp_path), "--json"]) == 0
    out, _ = capsys.readouterr()
    assert json.loads(out) == {"directory": str(tmp_path), "wrote": [str(tmp_path / name) for name in WRITTEN]}
    assert main(["init", str(tmp_path), "--json"]) == 2
    assert "already there" in json.loads(capsys.readouterr().out)["error"]["message"]


def test_the_repository_entry_files_are_the_ones_init_writes() -> None:
    written = files()
    assert written["inventory.py"] == (REPO / "inventory.py").read_text()
    assert written["deploys/gpu_node.py"] == (REPO / "deploys" / "gpu_node.py").read_text()


def test_init_refuses_to_overwrite_without_force(tmp_path: Path, capsys) -> None:
    (tmp_path / "cluster.yaml").write_text("mine\n")
    assert main(["init", str(tmp_path)]) == 2
    assert "already there: cluster.yaml" in capsys.readouterr().err
    assert (tmp_path / "cluster.yaml").read_text() == "mine\n"
    assert not (tmp_path / "inventory.py").exists()
    assert main(["init", "--force", str(tmp_path)]) == 0
    assert (tmp_path / "cluster.yaml").read_text() == starter.render()


def test_starter_defaults_shown_are_the_defaults(tmp_path: Path) -> None:
    """Commented out or written out, the starter file loads to the same cluster: the defaults shown are real."""
    commented, explicit = tmp_path / "commented.yaml", tmp_path / "explicit.yaml"
    commented.write_text(starter.render())
    explicit.write_text(starter.render(commented=False))
    assert "# reboot: \"never\"" in commented.read_text() and "    reboot: \"never\"" in explicit.read_text()
    loaded = load_cluster(commented)
    assert dataclasses.replace(loaded, source=str(explicit)) == load_cluster(explicit)


def test_init_directory_resolves_with_pyinfra(tmp_path: Path) -> None:
    """In the new directory pyinfra finds ./cluster.yaml with no environment variable (parse only, no connection)."""
    site = tmp_path / "site"
    assert main(["init", str(site)]) == 0
    env = {k: v for k, v in os.environ.items() if k not in ("GPU_PROVISION_CLUSTER", "GPU_PROVISION_NODE")}
    proc = subprocess.run([sys.executable, "-m", "pyinfra", "inventory.py", "debug-inventory"], cwd=site, env=env,
                          capture_output=True, text=True, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "[gpu-01]" in output and '"ssh_hostname": "192.0.2.10"' in output
    tree = ast.parse((site / "deploys" / "gpu_node.py").read_text())
    imported = [node for node in tree.body if isinstance(node, ast.ImportFrom)]
    assert [(i.module, [a.name for a in i.names]) for i in imported] == [("gpu_provision.deploys", ["gpu_node"])]


@pytest.mark.parametrize("name", ["gpu_node", "cluster", "verify"])
def test_pyinfra_resolves_each_packaged_deploy_by_name(name: str) -> None:
    """``pyinfra INVENTORY gpu_provision.deploys.NAME`` runs the function the thin ``deploys/NAME.py`` calls."""
    assert try_import_module_attribute(f"gpu_provision.deploys.{name}") is getattr(deploys, name)
    thin = ast.parse((REPO / "deploys" / f"{name}.py").read_text())
    calls = [node.value.func.id for node in thin.body
             if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)]
    assert calls == [name]
