"""``pyinfra @local deploys/gpu_node.py --dry`` on this machine with a one-node cluster file (how a node checks
itself before a real run): the probe runs locally, read-only, and every host-stack operation is planned."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ONE_NODE = """\
version: v1
cluster:
  name: local
  kubernetes: {enabled: false}
nodes:
  - name: gpu-01
    address: 127.0.0.1
    gpus: {model: H200, count: 8}
    permissions: {group: gpu, mode: "0660"}
"""


def test_local_dry_run_plans_the_host_stack(tmp_path: Path) -> None:
    cluster = tmp_path / "one.yaml"
    cluster.write_text(ONE_NODE)
    env = {**os.environ, "GPU_PROVISION_CLUSTER": str(cluster), "GPU_PROVISION_NODE": "gpu-01",
           "GPU_PROVISION_STAGES": "preflight,driver,runtime,toolkit,permissions", "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-m", "pyinfra", "@local", "deploys/gpu_node.py", "--dry"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    for operation in ("NVIDIA driver | Driver packages (pinned, held)", "Container runtime | containerd configuration",
                      "NVIDIA container toolkit | Register the nvidia runtime with containerd",
                      "GPU device permissions | nvidia module device-file options"):
        assert operation in output, output[-4000:]


def test_unknown_stage_names_are_refused(tmp_path: Path) -> None:
    cluster = tmp_path / "one.yaml"
    cluster.write_text(ONE_NODE)
    env = {**os.environ, "GPU_PROVISION_CLUSTER": str(cluster), "GPU_PROVISION_NODE": "gpu-01",
           "GPU_PROVISION_STAGES": "preflight,drivers"}
    proc = subprocess.run([sys.executable, "-m", "pyinfra", "@local", "deploys/gpu_node.py", "--dry"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    assert "GPU_PROVISION_STAGES: unknown stage(s) drivers" in proc.stdout + proc.stderr
