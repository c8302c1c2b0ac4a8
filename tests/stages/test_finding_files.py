"""A drift finding about a file names the file it was read from."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from nodestates import dumps, fresh, with_file

from gpu_provision.drift.report import FleetReport, NodeReport
from gpu_provision.spec import load_cluster
from gpu_provision.stages import runtime, toolkit
from gpu_provision.state import NodeStateData

CLUSTER = load_cluster(str(Path(__file__).resolve().parents[2] / "inventory" / "cluster.yaml"))
H200 = CLUSTER.node("h200-01")


def test_docker_default_runtime_finding_names_daemon_json() -> None:
    docker = replace(H200, container_runtime=replace(H200.container_runtime, kind="docker"))
    cluster = replace(CLUSTER, kubernetes=replace(CLUSTER.kubernetes, enabled=False))
    raw = with_file(fresh("debian12", gpus=8), runtime.DAEMON_JSON,
                    dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}))
    (finding,) = [d for d in toolkit.extra_differences(docker, cluster, NodeStateData(raw))
                  if d.kind == "nvidia-runtime"]
    assert finding.actual == "nvidia is not Docker's default runtime"
    assert finding.source == "/etc/docker/daemon.json"
    assert str(finding).endswith("found nvidia is not Docker's default runtime (read /etc/docker/daemon.json)")
    node = NodeReport("h200-01", "127.0.0.1", [finding])
    assert node.to_json()["differences"][0]["file"] == "/etc/docker/daemon.json"
    assert "(read /etc/docker/daemon.json)" in FleetReport([node], ["toolkit"]).render()


def test_containerd_finding_names_its_config_and_drop_in() -> None:
    (finding,) = [d for d in toolkit.extra_differences(H200, CLUSTER, NodeStateData(fresh("debian12", gpus=8)))
                  if d.kind == "nvidia-runtime"]
    assert finding.source == f"{runtime.CONTAINERD_CONFIG}, {toolkit.NVIDIA_DROPIN}"
