"""``gpu-provision mig-assert``: the plan for this machine's GPUs, read locally, never applied; and the probe answer
captured on a real two-H200 host."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from migsim import MigNode

from gpu_provision.mig.plan import mig_actions
from gpu_provision.node.mig import layout
from gpu_provision.node.mig.model import ProfileTable
from gpu_provision.spec import catalog, load_cluster

HERE = Path(__file__).resolve().parent
CLUSTER = """\
version: v1
cluster:
  name: devbox
  kubernetes: {enabled: false}
nodes:
  - name: h200-dev
    address: 127.0.0.1
    gpus: {model: H200, count: 2}
    device_plugin: {mig_strategy: mixed}
    mig:
      layout: {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}
      gpus:
        "1": {layout: {"4g.71gb": 1, "3g.71gb": 1}}
"""


def test_real_probe_answer_gives_the_captured_plan(tmp_path: Path) -> None:
    """The probe answer from the real host, through the controller's planner, prints what mig-assert printed there."""
    probe = json.loads((HERE / "fixtures" / "probe-h200x2-device.json").read_text())
    assert probe["tables"]["0"] == probe["tables"]["1"]
    assert ProfileTable.from_dict(probe["tables"]["0"]) == catalog.model("H200").mig
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    node = load_cluster(tmp_path / "cluster.yaml").node("h200-dev")
    actions = mig_actions(node.mig.planned, probe)
    captured = (HERE / "fixtures" / "mig-assert-h200x2-device.txt").read_text()
    steps = [line.split(". ", 1)[1] for line in captured.splitlines() if line[:4].strip().rstrip(".").isdigit()]
    assert [str(a) for a in actions] == steps
    commands = [line.strip()[2:] for line in captured.splitlines() if line.strip().startswith("$ ")]
    assert [" ".join(c) for a in actions for c in layout.commands(a)] == commands


def test_mig_assert_on_simulated_gpus(mig_node: MigNode, tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    argv = [sys.executable, "-m", "gpu_provision.commands.mig", "--node-file", str(cluster), "--node", "h200-dev"]
    before = mig_node.sh(*argv)
    assert before.returncode == 1, before.stdout + before.stderr
    assert "plan (not applied):" in before.stdout
    assert "$ nvidia-smi mig -i 1 -cgi 4g.71gb:0 -C" in before.stdout
    assert mig_node.mode(0) == "Disabled, Disabled", "mig-assert must not change anything"
    doc = {"version": "v1", "mig-configs": {"h200-dev": [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}},
        {"devices": [1], "mig-enabled": True, "mig-devices": {"4g.71gb": 1, "3g.71gb": 1}}]}}
    assert mig_node.apply(doc).returncode == 0
    after = mig_node.sh(*argv, "--json")
    assert after.returncode == 0, after.stdout + after.stderr
    report = json.loads(after.stdout)
    assert report["plan"] == [] and report["drift"] == []
    assert report["gpus"]["1"] == {"expected": "4g.71gb@0:4, 3g.71gb@4:4", "found": "4g.71gb@0:4, 3g.71gb@4:4"}


def test_mig_assert_through_the_cli(mig_node: MigNode, tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    unknown = mig_node.sh(sys.executable, "-m", "gpu_provision.cli", "mig-assert", "--node-file", str(cluster),
                          "--node", "nope")
    assert unknown.returncode == 2 and unknown.stderr.strip().endswith("no node named nope")
    result = subprocess.run([sys.executable, "-m", "gpu_provision.cli", "mig-assert", "--node-file", str(cluster),
                             "--node", "h200-dev"], env=mig_node.env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "GPU 1: found    MIG disabled" in result.stdout
