"""The controller path for real: pyinfra's API with the @local connector ships the agent zip and the expectations,
runs the agent on a simulated node, collects the report and prints the fleet table (``gpu-provision verify``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agentsim import H200_GPUS

from gpu_provision.verify import collect
from gpu_provision.verify.agent import agent_digest
from gpu_provision.verify.report import schema_problems

REPO = Path(__file__).resolve().parents[2]


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
    # The node keeps the agent by version in a root-only directory; the run's own files are gone.
    assert [p.name for p in remote.iterdir() if not p.name.startswith(f"{agent_digest()}.cpython-")] == [
        f"{agent_digest()}.pyz"]
    assert remote.stat().st_mode & 0o777 == 0o700
    assert schema_problems(report) == []
    assert report["node"] == "sim-node" and report["status"] == "pass"
    assert [g["uuid"] for g in report["host"]["gpus"]] == [g["uuid"] for g in H200_GPUS]
    saved = json.loads((tmp_path / "reports" / "@local.json").read_text())
    assert saved == report


def verify_command(*args: str) -> subprocess.CompletedProcess[str]:
    """``gpu-provision verify ARGS`` as users run it (a process of its own: the command patches the standard
    library for gevent first thing, which it must not do inside the test process)."""
    return subprocess.run([sys.executable, "-m", "gpu_provision.cli", "verify", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})  # the table's width, which a pipe does not give


def test_command_prints_table_and_fails_on_a_bad_node(sim_node, tmp_path: Path) -> None:
    sim_node.configure(H200_GPUS[:1])
    done = verify_command(str(_inventory(tmp_path, sim_node.expect(2))), "--remote-dir", str(tmp_path / "remote"))
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    out = done.stdout.splitlines()
    assert out[0].split() == ["NODE", "STATUS", "GPUS", "PASS", "FAIL", "SKIP", "TIME", "FIRST", "FAILURE"]
    assert out[1].split()[:3] == ["sim-node", "FAIL", "1/2"]
    assert "node.gpu.count: driver sees 1 GPU(s), the cluster file says 2" in out[1]
    assert out[-1] == "0 of 1 node(s) passed, 1 failed"


def test_command_json_output(sim_node, tmp_path: Path) -> None:
    done = verify_command(str(_inventory(tmp_path, sim_node.expect())), "--json", "--remote-dir",
                          str(tmp_path / "remote"))
    assert done.returncode == 0, done.stderr
    reports = json.loads(done.stdout)
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
    assert any(line.split()[:2] == ["sim-node", "PASS"] for line in healthy.stderr.splitlines())
    assert "1 of 1 node(s) passed" in healthy.stderr and healthy.stdout == ""
    report = json.loads((tmp_path / "reports" / "verify" / "@local.json").read_text())
    assert report["status"] == "pass" and schema_problems(report) == []

    sim_node.configure(H200_GPUS[:1])
    broken = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert any(line.split()[:3] == ["sim-node", "FAIL", "1/2"] for line in broken.stderr.splitlines())
    assert "0 of 1 node(s) passed, 1 failed" in broken.stderr


def test_pyinfra_cli_names_the_failed_checks_and_reads_as_no_crash(sim_node, tmp_path: Path) -> None:
    """A node that fails verification under ``pyinfra``: one line naming every failed check and where the report
    is, a non-zero exit, pyinfra's results table, and none of pyinfra's crash-like lines ("Error: executed 0
    commands", "No hosts remaining!")."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    sim_node.configure(H200_GPUS[:1])
    argv = [sys.executable, "-m", "pyinfra", "-y", str(_inventory(tmp_path, sim_node.expect(2))),
            str(root / "deploys" / "verify.py")]
    broken = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    report = json.loads((tmp_path / "reports" / "verify" / "@local.json").read_text())
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    assert [c["id"] for c in failed] == ["node.gpu.count", "node.pci.gpus"]
    (line,) = [line for line in broken.stderr.splitlines() if "verify fail:" in line]
    assert line.strip().startswith("[@local] verify fail: 13 passed, 2 failed, 7 skipped in ")
    assert line.endswith("; failed checks: node.gpu.count: driver sees 1 GPU(s), the cluster file says 2; "
                         "node.pci.gpus: 1 H200 GPU(s) on the PCI bus, expected 2 (report: reports/verify/@local.json)")
    assert "executed 0 commands" not in broken.stderr and "No hosts remaining" not in broken.stderr
    assert "pyinfra error" not in broken.stderr and "Traceback" not in broken.stderr
    results = broken.stderr[broken.stderr.index("--> Results:"):].splitlines()
    # The agent run is a check: in pyinfra's table neither a change nor an error (the exit status says "failed").
    assert any(row.split()[-7:] == ["Run", "verification", "agent", "1", "-", "-", "1"] for row in results), results

    # With --json, stdout is pyinfra's JSON alone (the fleet table is on stderr), naming the failed node.
    as_json = subprocess.run([*argv[:3], "--json", *argv[3:]], cwd=tmp_path, capture_output=True, text=True,
                             timeout=300)
    assert as_json.returncode == 1, as_json.stderr
    results = json.loads(as_json.stdout)["results"]
    assert results["failed_hosts"] == ["@local"] and results["totals"]["error"] == 0
    assert "failed checks: node.gpu.count: " in as_json.stderr and "0 of 1 node(s) passed" in as_json.stderr


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


def test_operations_after_a_failed_verification_still_run(sim_node, tmp_path: Path) -> None:
    """A node that fails verification is marked failed, not taken out of the run: what the deploy does after the
    verify stage (releasing the node's run lock) still happens there, and the exit status is still 1."""
    import subprocess
    import sys

    sim_node.configure(H200_GPUS[:1])
    marker = tmp_path / "after-verification"
    deploy = tmp_path / "verify_then_more.py"
    deploy.write_text("from pyinfra.operations import server\n\nfrom gpu_provision.deploys import verify\n\n"
                      f"verify()\nserver.shell(name='After verification', commands=['touch {marker}'])\n")
    argv = [sys.executable, "-m", "pyinfra", "-y", str(_inventory(tmp_path, sim_node.expect(2))), str(deploy)]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "verify fail:" in done.stderr and marker.exists()
