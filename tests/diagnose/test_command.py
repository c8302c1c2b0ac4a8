"""``gpu-provision diagnose`` as a user runs it: one bundle per node, the doctor's summary, exit statuses."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

from diagnose_samples import EXPECT

from gpu_provision.commands.diagnose import add_to_archive, archive_name, node_request, safe_name
from gpu_provision.doctor import RULES, Fault, FleetDiagnosis, NodeDiagnosis, from_archive

ROOT = Path(__file__).resolve().parents[2]


def diagnose(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpu_provision.cli", "diagnose", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_local_host_gives_a_bundle_and_a_summary(tmp_path):
    proc = diagnose("@local", "--out", str(tmp_path / "out"), "--no-bug-report", "--config", "absent.py", "--json",
                    cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    [node] = json.loads(proc.stdout)["nodes"]
    # The bundle is named after the node (its host name here), not after the connector.
    assert node["error"] is None and node["bundle"] == str(tmp_path / "out" / f"{safe_name(socket.gethostname())}.tar.gz")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted([Path(node["bundle"]).name, "summary.json"])
    with tarfile.open(node["bundle"]) as archive:
        names = set(archive.getnames())
    assert {"manifest.json", "probe.json", "kernel/nvidia.log", "expectations.json", "controller/drift.json"} <= names
    assert json.loads((tmp_path / "out" / "summary.json").read_text()) == json.loads(proc.stdout)


def test_unreachable_node_exits_2(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(json.dumps({"version": "v1", "cluster": {
        "name": "diagnose-test", "kubernetes": {"enabled": False},
        "ssh": {"user": "root", "connect_timeout": 1, "strict_host_key_checking": False}},
        "nodes": [{"name": "down", "address": "127.0.0.1", "ssh": {"port": port}}]}))
    proc = diagnose("inventory.py", "--cluster", str(cluster), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr
    assert f"down: not diagnosed: unreachable: Could not connect ([Errno None] Unable to connect to port {port}" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_node_request_and_controller_documents(tmp_path):
    assert node_request(EXPECT, bug_report=False) == {
        "users": ["alice"], "images": ["nvidia/cuda:12.8.1-base-ubuntu24.04"], "bug_report": False}
    path = tmp_path / "n.tar.gz"
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"version": 1, "node": "gpu-01"}))
    with tarfile.open(path, "w:gz") as archive:
        archive.add(manifest, arcname="manifest.json")
    add_to_archive(str(path), {"expectations.json": EXPECT.to_json()})
    assert from_archive(str(path)).expect == EXPECT


def test_bundle_is_named_after_the_node(tmp_path, monkeypatch):
    monkeypatch.delenv("GPU_PROVISION_NODE", raising=False)
    path = tmp_path / "b.tar.gz"
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"version": 1, "node": "gpu-07"}))
    with tarfile.open(path, "w:gz") as archive:
        archive.add(manifest, arcname="manifest.json")
    assert archive_name("gpu-01", str(path)) == "gpu-01"  # an inventory host is its node
    assert archive_name("@local", str(path)) == "gpu-07"  # the host name the node reported
    monkeypatch.setenv("GPU_PROVISION_NODE", "gpu-03")
    assert archive_name("@local", str(path)) == "gpu-03"  # the node the user named
    monkeypatch.setenv("GPU_PROVISION_NODE", "../x y")
    assert archive_name("@local", str(path)) == "_x_y"  # never a path
    with tarfile.open(path, "w:gz"):
        pass
    monkeypatch.delenv("GPU_PROVISION_NODE")
    assert archive_name("@ssh/odd:name", str(path)) == "_ssh_odd_name"  # no manifest: the host name, made safe


def test_summary_and_exit_status():
    rule = RULES[0]
    found = NodeDiagnosis(node="gpu-01", archive="out/gpu-01.tar.gz", findings=[Fault(rule, "an image")])
    clean = NodeDiagnosis(node="gpu-02", archive="out/gpu-02.tar.gz")
    assert FleetDiagnosis([clean], "out").exit_status == 0
    assert FleetDiagnosis([clean, found], "out").exit_status == 1
    assert FleetDiagnosis([found, NodeDiagnosis(node="gpu-03", error="unreachable")], "out").exit_status == 2
    text = FleetDiagnosis([found, clean], "out").render()
    assert text.splitlines()[:3] == ["gpu-01: 1 finding (out/gpu-01.tar.gz)", f"  [{rule.id}] an image",
                                     f"    fix: {rule.fix}"]
    assert text.splitlines()[-1] == "2 node(s): 1 with findings, 0 not diagnosed; bundles in out"


def test_collection_commands_carry_the_hosts_sudo_and_sudo_password(monkeypatch):
    """A sudo login whose sudo needs a password gets it given through pyinfra data (``_sudo_password``), as the
    deploy's own commands do; diagnose used to pass ``_sudo`` alone."""
    from types import SimpleNamespace

    import pytest
    from pyinfra.api import Config, Inventory, State

    from gpu_provision.commands import diagnose as command
    from gpu_provision.errors import GpuProvisionError

    inventory = Inventory(([("gpu-01", {"ssh_user": "ops", "_sudo": True, "_sudo_password": "pw"})], {}))
    state = State(inventory, Config())
    host = inventory.get_host("gpu-01")
    asked: list[dict] = []
    monkeypatch.setattr(host, "run_shell_command", lambda cmd, **kw: (asked.append(kw), (False, None))[1])
    monkeypatch.setattr(command, "expectations_of", lambda target: EXPECT)
    reached = SimpleNamespace(host=host, state=state, log=SimpleNamespace(last_failure="refused"))
    with pytest.raises(GpuProvisionError, match="temporary folder"):
        command.collect_host(reached, "/nonexistent", bug_report=False, timeout=5.0)
    assert [(kw["_sudo"], kw["_sudo_password"]) for kw in asked] == [(True, "pw")]


def test_node_request_carries_the_verification_expectations(tmp_path):
    """The node entry gets the agent's expectations in the same request (one collection command), as
    ``gpu-provision verify`` would send them; a host the file gives no GPUs gets none."""
    from types import SimpleNamespace

    from gpu_provision.commands.diagnose import verify_expectations
    from gpu_provision.verify.expect import build_expectations

    expected = build_expectations("gpu-01", "H200", 1, device_permissions={"group": "gpu", "mode": "0660"})
    path = tmp_path / "expect.json"
    path.write_text(expected.to_json())
    host = SimpleNamespace(name="gpu-01", data={"gpu_provision_verify_expect": str(path)})
    assert verify_expectations(host) == expected.to_dict()
    assert node_request(EXPECT, bug_report=False, verify=expected.to_dict())["verify"] == expected.to_dict()
    assert "verify" not in node_request(EXPECT, bug_report=True, verify=None)
    assert verify_expectations(SimpleNamespace(name="@local", data={})) is None  # not a node of any cluster file
