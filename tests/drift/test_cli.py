"""``gpu-provision drift`` as a user runs it: the repository's inventory.py, a cluster file, exit statuses, JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
from drift_samples import write_cluster

from gpu_provision.drift.schema import REPORT_SCHEMA

ROOT = Path(__file__).resolve().parents[2]


def drift(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpu_provision.cli", "drift", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_unreachable_and_stalled_nodes_are_listed_as_not_checked(tmp_path, closed_port, silent_listener):
    cluster = write_cluster(tmp_path / "cluster.yaml", [
        {"name": "down", "address": "127.0.0.1", "ssh": {"port": closed_port}},
        {"name": "stalled", "address": silent_listener[0], "ssh": {"port": silent_listener[1]}},
    ], connect_timeout=1)
    proc = drift("inventory.py", "--cluster", str(cluster), "--json")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    report = json.loads(proc.stdout)
    jsonschema.validate(report, REPORT_SCHEMA)
    nodes = {n["name"]: n for n in report["nodes"]}
    assert nodes["down"]["status"] == "not-checked"
    assert nodes["down"]["problems"] == [
        f"unreachable: Could not connect ([Errno None] Unable to connect to port {closed_port} on 127.0.0.1)"]
    assert nodes["stalled"]["status"] == "not-checked"
    assert nodes["stalled"]["problems"] == ["unreachable: SSH error (Error reading SSH protocol banner)"]
    assert report["summary"]["not-checked"] == 2
    assert report["connect_timeout"] == 1


def test_text_report_and_timeout_from_the_command_line(tmp_path, closed_port):
    cluster = write_cluster(tmp_path / "cluster.yaml", [
        {"name": "down", "address": "127.0.0.1", "ssh": {"port": closed_port}}])
    proc = drift("inventory.py", "--cluster", str(cluster), "--connect-timeout", "3", "--parallel", "4")
    assert proc.returncode == 2
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("down  not checked: unreachable: Could not connect")
    assert lines[-1].startswith("1 node: 0 in sync, 0 with drift, 1 not checked")


def test_bad_cluster_file_exits_2_without_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: v1\nnodes: 3\n")
    proc = drift("inventory.py", "--cluster", str(bad))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert str(bad) in proc.stderr


def test_unknown_stage_and_missing_inventory_are_user_errors(tmp_path, closed_port):
    cluster = write_cluster(tmp_path / "cluster.yaml", [
        {"name": "down", "address": "127.0.0.1", "ssh": {"port": closed_port}}])
    proc = drift("inventory.py", "--cluster", str(cluster), "--stage", "no-such-stage")
    assert proc.returncode == 2
    assert proc.stderr.startswith("no stage called 'no-such-stage'")
    proc = drift(str(tmp_path / "missing.py"))
    assert proc.returncode == 2
    assert "no such inventory file" in proc.stderr


def test_parallelism_and_timeout_from_the_pyinfra_config_file_and_the_command_line(tmp_path, closed_port):
    cluster = write_cluster(tmp_path / "cluster.yaml", [
        {"name": "down", "address": "127.0.0.1", "ssh": {"port": closed_port}},
        {"name": "down2", "address": "127.0.0.2", "ssh": {"port": closed_port}}])
    config = tmp_path / "config.py"
    config.write_text("from pyinfra import config\nconfig.PARALLEL = 1\nconfig.CONNECT_TIMEOUT = 4\n")
    report = json.loads(drift("inventory.py", "--cluster", str(cluster), "--config", str(config), "--json").stdout)
    assert (report["parallel"], report["connect_timeout"]) == (1, 4)
    report = json.loads(drift("inventory.py", "--cluster", str(cluster), "--config", str(config), "--json",
                              "--parallel", "2", "--connect-timeout", "3").stdout)
    assert (report["parallel"], report["connect_timeout"]) == (2, 3)
    config.write_text("config.PARALLEL = \n")
    proc = drift("inventory.py", "--cluster", str(cluster), "--config", str(config))
    assert proc.returncode == 2
    assert proc.stderr.startswith(str(config))
    assert "Traceback" not in proc.stderr


def test_a_connector_inventory_is_accepted_like_in_verify_and_diagnose(tmp_path, closed_port):
    """``drift @local`` reads this machine as the node GPU_PROVISION_NODE names (as verify and diagnose do)."""
    cluster = write_cluster(tmp_path / "cluster.yaml", [
        {"name": "here", "address": "127.0.0.1", "ssh": {"port": closed_port}}])
    proc = subprocess.run([sys.executable, "-m", "gpu_provision.cli", "drift", "@local", "--cluster", str(cluster),
                           "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "GPU_PROVISION_NODE": "here"})
    assert "no such inventory file" not in proc.stderr
    assert proc.returncode in (0, 1), proc.stderr
    assert [node["name"] for node in json.loads(proc.stdout)["nodes"]] == ["@local"]
