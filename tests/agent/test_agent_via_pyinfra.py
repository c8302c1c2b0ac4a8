"""The controller path for real: pyinfra's API with the @local connector ships the agent zip and the expectations,
runs the agent on a simulated node, collects the report and prints the fleet table (``gpu-provision verify``)."""

from __future__ import annotations

import json
from pathlib import Path

from agentsim import H200_GPUS

from gpu_provision.bundle import BUNDLE_NAME
from gpu_provision.commands import verify as verify_command
from gpu_provision.verify import collect
from gpu_provision.verify.report import schema_problems


def _inventory(tmp_path: Path, expect: dict) -> Path:
    expect_file = tmp_path / "expect-local.json"
    expect_file.write_text(json.dumps(expect))
    inventory = tmp_path / "inventory_local.py"
    data = {"gpu_provision_verify_expect": str(expect_file), "gpu_provision_verify_dir": str(tmp_path / "node")}
    inventory.write_text(f"hosts = [('@local', {data!r})]\n")
    return inventory


def test_local_run_ships_agent_and_collects_report(sim_node, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    reports = collect.run(str(_inventory(tmp_path, sim_node.expect())), remote_dir=str(remote),
                          report_dir=str(tmp_path / "reports"))
    (report,) = reports
    assert (remote / BUNDLE_NAME).exists() and (remote / "expect.json").exists()
    assert json.loads((remote / "expect.json").read_text())["node"] == "sim-node"
    assert schema_problems(report) == []
    assert report["node"] == "sim-node" and report["status"] == "pass"
    assert [g["uuid"] for g in report["host"]["gpus"]] == [g["uuid"] for g in H200_GPUS]
    saved = json.loads((tmp_path / "reports" / "@local.json").read_text())
    assert saved == report


def test_command_prints_table_and_fails_on_a_bad_node(sim_node, tmp_path: Path, capsys) -> None:
    sim_node.configure(H200_GPUS[:1])
    parser = __import__("argparse").ArgumentParser()
    verify_command.register(parser.add_subparsers())
    args = parser.parse_args(["verify", str(_inventory(tmp_path, sim_node.expect(2))),
                              "--remote-dir", str(tmp_path / "remote")])
    assert args.handler(args) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["NODE", "STATUS", "GPUS", "PASS", "FAIL", "SKIP", "TIME", "FIRST", "FAILURE"]
    assert out[1].split()[:3] == ["sim-node", "FAIL", "1/2"]
    assert "node.gpu.count: driver sees 1 GPU(s), the cluster file says 2" in out[1]
    assert out[-1] == "0 of 1 node(s) passed, 1 failed"


def test_command_json_output(sim_node, tmp_path: Path, capsys) -> None:
    parser = __import__("argparse").ArgumentParser()
    verify_command.register(parser.add_subparsers())
    args = parser.parse_args(["verify", str(_inventory(tmp_path, sim_node.expect())), "--json",
                              "--remote-dir", str(tmp_path / "remote")])
    assert args.handler(args) == 0
    reports = json.loads(capsys.readouterr().out)
    assert [r["status"] for r in reports] == ["pass"]


def test_two_runs_in_one_process_return_their_own_reports(sim_node, tmp_path: Path) -> None:
    """Reports come back by value: a later run in the same process leaves an earlier run's reports as they were."""
    inventory = str(_inventory(tmp_path, sim_node.expect()))
    first = collect.run(inventory, remote_dir=str(tmp_path / "remote"))
    sim_node.configure(H200_GPUS[:1])
    second = collect.run(inventory, remote_dir=str(tmp_path / "remote"))
    assert [r["status"] for r in first] == ["pass"] and [r["status"] for r in second] == ["fail"]
    assert len(first[0]["host"]["gpus"]) == 2 and len(second[0]["host"]["gpus"]) == 1


def test_unreachable_host_gets_an_error_report(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory_down.py"
    # Nothing listens on this loopback port: the connection is refused locally.
    inventory.write_text('hosts = [("down-node", {"ssh_hostname": "127.0.0.1", "ssh_port": 1, '
                         '"ssh_connect_retries": 0, "gpu_provision_verify_expect": "/nonexistent"})]\n')
    (report,) = collect.run(str(inventory))
    assert report["status"] == "error" and report["node"] == "down-node"
    assert report["error"].startswith("unreachable: Could not connect")
    assert schema_problems(report) == []


def test_pyinfra_cli_runs_the_verify_deploy(sim_node, tmp_path: Path) -> None:
    """``pyinfra inventory deploys/verify.py``: passes on a healthy node, exits non-zero once a GPU is lost."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    inventory = _inventory(tmp_path, sim_node.expect())
    argv = [sys.executable, "-m", "pyinfra", "-y", str(inventory), str(root / "deploys" / "verify.py")]
    healthy = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "verify pass:" in healthy.stdout + healthy.stderr
    assert any(line.split()[:2] == ["sim-node", "PASS"] for line in healthy.stdout.splitlines())
    assert "1 of 1 node(s) passed" in healthy.stdout
    report = json.loads((tmp_path / "reports" / "verify" / "@local.json").read_text())
    assert report["status"] == "pass" and schema_problems(report) == []

    sim_node.configure(H200_GPUS[:1])
    broken = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert broken.returncode != 0
    assert "first failure: node.gpu.count: driver sees 1 GPU(s), the cluster file says 2" in (
        broken.stdout + broken.stderr)
    # The table still comes when every node failed (pyinfra stops with "No hosts remaining!").
    assert any(line.split()[:3] == ["sim-node", "FAIL", "1/2"] for line in broken.stdout.splitlines())
    assert "0 of 1 node(s) passed, 1 failed" in broken.stdout


def test_node_without_gpus_is_skipped(tmp_path: Path, monkeypatch) -> None:
    """The cluster file's control-plane node has no GPUs: the stage does nothing there and no report is made."""
    root = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("GPU_PROVISION_NODE", "cp-01")
    inventory = tmp_path / "inventory_cp.py"
    data = {"gpu_provision_cluster_file": str(root / "inventory" / "cluster.yaml"),
            "gpu_provision_verify_dir": str(tmp_path / "node")}
    inventory.write_text(f"hosts = [('@local', {data!r})]\n")
    assert collect.run(str(inventory)) == []
    assert not (tmp_path / "node").exists()
