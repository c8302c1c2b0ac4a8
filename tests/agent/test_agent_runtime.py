"""Container and Kubernetes checks through stand-in ``docker``/``ctr``/``kubectl`` programs.

No container engine or API server runs on the test machine, so small scripts named after the real programs
record their arguments and answer as the real ones do; the GPU listing inside the "container" comes from the
GPU simulator's nvidia-smi.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from agentsim import by_id

from gpu_provision.node.verify import runtime


def stand_in(bin_dir: Path, name: str, body: str) -> Path:
    """Write an executable Python script ``bin_dir/name`` that logs its argv to ``<name>.log`` then runs ``body``."""
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    log = bin_dir / f"{name}.log"
    script.write_text(f"#!{sys.executable}\nimport json, subprocess, sys\n"
                      f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n{body}\n")
    script.chmod(0o755)
    return log


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "standin-bin"
    path.mkdir()
    monkeypatch.setenv("PATH", f"{path}{os.pathsep}{os.environ['PATH']}")
    return path


def test_docker_runtime_container_sees_the_gpus(sim_node, run_agent, bin_dir: Path) -> None:
    smi = sim_node.paths["nvidia_smi"]
    log = stand_in(bin_dir, "docker", f"sys.exit(subprocess.call([{smi!r}, '-L']))")
    expect = sim_node.expect(2, container={"kind": "docker", "runtime": "nvidia", "image": "ubuntu:24.04"})
    rc, report = run_agent(expect)
    check = by_id(report)["node.container.gpus"]
    assert check["status"] == "pass" and check["measured"]["devices"] == 2
    argv = json.loads(log.read_text().splitlines()[0])
    assert argv[:2] == ["run", "--rm"] and argv[-3:] == ["ubuntu:24.04", "nvidia-smi", "-L"]
    assert "--runtime" in argv and argv[argv.index("--runtime") + 1] == "nvidia"
    assert "NVIDIA_VISIBLE_DEVICES=all" in argv
    assert rc == 0


def test_docker_cdi_container_that_sees_one_gpu_fails(sim_node, run_agent, bin_dir: Path) -> None:
    smi = sim_node.paths["nvidia_smi"]
    log = stand_in(bin_dir, "docker", f"sys.exit(subprocess.call([{smi!r}, '-L', '-i', '0']))")
    expect = sim_node.expect(2, container={"kind": "docker", "cdi": True, "image": "ubuntu:24.04"})
    rc, report = run_agent(expect)
    check = by_id(report)["node.container.gpus"]
    assert check["status"] == "fail" and check["reason"] == "container sees 1 GPU device(s), expected 2"
    argv = json.loads(log.read_text().splitlines()[0])
    assert argv[argv.index("--device") + 1] == "nvidia.com/gpu=all"
    assert rc == 1


def test_runtime_missing_is_a_failure(sim_node, run_agent, bin_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(bin_dir))  # no docker anywhere
    rc, report = run_agent(sim_node.expect(2, container={"kind": "docker", "image": "ubuntu:24.04"}))
    check = by_id(report)["node.container.gpus"]
    assert check["status"] == "fail" and check["reason"] == "docker not found"


def test_no_image_configured_is_a_skip(sim_node, run_agent) -> None:
    rc, report = run_agent(sim_node.expect(2, container={"kind": "containerd"}))
    check = by_id(report)["node.container.gpus"]
    assert check["status"] == "skip" and check["reason"] == "no container image configured for the check"


def test_containerd_command() -> None:
    argv = runtime.container_command({"kind": "containerd", "cdi": True, "image": "docker.io/library/ubuntu:24.04"})
    assert argv[:5] == ["ctr", "--namespace", "gpu-provision", "run", "--rm"]
    assert "--runc-binary=/usr/bin/nvidia-container-runtime" in argv
    assert "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all" in argv


def test_kubernetes_allocatable_and_pod(sim_node, run_agent, bin_dir: Path, tmp_path: Path) -> None:
    """kubectl stand-in: the Node object, and a pod whose log is the CUDA probe's answer from a GPU."""
    node = {"status": {"allocatable": {"cpu": "32", "nvidia.com/gpu": "2"}}}
    pod_log = {"driver_version": 13000, "devices": [{"ordinal": 0, "name": "NVIDIA H200",
                                                     "vector_add": {"elements": 1048576, "mismatches": 0,
                                                                    "seconds": 0.4}}]}
    manifest_copy = tmp_path / "pod.json"
    body = f"""
args = sys.argv[1:]
if "get" in args and "node" in args:
    print(json.dumps({node!r}))
elif "create" in args:
    open({str(manifest_copy)!r}, "w").write(open(args[args.index("-f") + 1]).read())
elif "jsonpath={{.status.phase}}" in args:
    print("Succeeded")
elif "logs" in args:
    print(json.dumps({pod_log!r}))
"""
    log = stand_in(bin_dir, "kubectl", body)
    kubeconfig = tmp_path / "admin.conf"
    kubeconfig.write_text("apiVersion: v1\n")
    kube = {"enabled": True, "node_name": "sim-node", "allocatable": {"nvidia.com/gpu": 2},
            "pod_image": "python:3.12-slim", "kubeconfig": str(kubeconfig)}
    expect = sim_node.expect(2, kubernetes=kube)
    rc, report = run_agent(expect)
    checks = by_id(report)
    assert checks["node.kubernetes.allocatable"]["status"] == "pass"
    assert checks["node.kubernetes.pod_cuda"]["status"] == "pass", checks["node.kubernetes.pod_cuda"]
    pod = json.loads(manifest_copy.read_text())
    container = pod["spec"]["containers"][0]
    assert pod["spec"]["nodeName"] == "sim-node" and container["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert container["command"][:2] == ["python3", "-c"] and "def probe_devices" in container["command"][2]
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert all(call[:2] == ["--kubeconfig", str(kubeconfig)] for call in calls)
    assert any("delete" in call for call in calls[-1:])
