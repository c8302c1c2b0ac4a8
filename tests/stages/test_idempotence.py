"""A node left as the stages want it shows no difference and makes no operation yield a command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fakehost import FakeHost, run_op
from nodestates import converged, dumps, fresh, with_file

from gpu_provision.desired import FileWant, GroupWant, PackageWant, UnitWant, differences
from gpu_provision.operations import accounts, files, packages, repos, services
from gpu_provision.spec import load_cluster
from gpu_provision.stages import driver, permissions, runtime, toolkit
from gpu_provision.state import NodeStateData

CLUSTER = load_cluster(str(Path(__file__).resolve().parents[2] / "inventory" / "cluster.yaml"))
STAGES = (driver, runtime, toolkit, permissions)
REPOSITORIES = {"cuda": CLUSTER.mirrors.cuda, "docker": CLUSTER.mirrors.docker,
                "nvidia-container-toolkit": CLUSTER.mirrors.container_toolkit}


def _wants(node: Any, state: NodeStateData) -> list[Any]:
    return [w for stage in STAGES for w in stage.wants(node, CLUSTER, state)]


def _after_deploy(name: str, os_key: str, containerd: str) -> dict[str, Any]:
    """What a node answers after a deploy: wants met (twice: the GID is known after the group exists), the
    tools' own changes made (nvidia-ctk's runtime entry, CDI spec, keyrings)."""
    node = CLUSTER.node(name)
    raw = fresh(os_key, gpus=node.gpus.count)
    raw["runtime"]["containerd_version"] = containerd
    for _ in range(2):
        raw = converged(raw, _wants(node, NodeStateData(raw)))
    for repo in REPOSITORIES:
        raw["files"][repos.keyring_path(repo)] = {"exists": True, "type": "file", "mode": "0644",
                                                 "owner": "root", "group": "root"}
    if node.has_gpus:
        kinds = runtime.runtimes(node, CLUSTER)
        if "docker" in kinds:
            data = json.loads(NodeStateData(raw).file(runtime.DAEMON_JSON).content or "{}")
            data.update(runtimes={"nvidia": {"args": [], "path": "nvidia-container-runtime"}},
                        **{"default-runtime": "nvidia"})
            raw = with_file(raw, runtime.DAEMON_JSON, dumps(data))
        if "containerd" in kinds:
            raw = with_file(raw, toolkit.NVIDIA_DROPIN, 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'
                            '  default_runtime_name = "nvidia"\n'
                            '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
                            '  runtime_type = "io.containerd.runc.v2"\n')
        raw["runtime"].update(cdi_spec_mtime=2000, driver_installed_at=1000)
    if node.driver.install_method == "preinstalled":
        # The image's driver (a vGPU host's vGPU Manager) was there before the deploy: nvidia-smi answers.
        raw["gpu"].update(smi_rc=0, gpus=[{"driver_version": f"{node.driver.spell('branch')}.105.08"}] * node.gpus.count)
    return raw


CASES = [(n.name, os_key, containerd) for n in CLUSTER.nodes for os_key in ("debian12", "ubuntu2404", "rocky9")
         for containerd in ("1.7.24", "2.0.2")]


@pytest.mark.parametrize(("name", "os_key", "containerd"), CASES)
def test_converged_node_has_no_differences(name: str, os_key: str, containerd: str) -> None:
    node = CLUSTER.node(name)
    state = NodeStateData(_after_deploy(name, os_key, containerd))
    for stage in STAGES:
        assert differences(stage.wants(node, CLUSTER, state), state, stage.NAME) == []
        extra = getattr(stage, "extra_differences", None)
        assert extra is None or extra(node, CLUSTER, state) == []


@pytest.mark.parametrize(("name", "os_key", "containerd"), CASES)
def test_converged_node_gets_no_commands(name: str, os_key: str, containerd: str) -> None:
    node = CLUSTER.node(name)
    raw = _after_deploy(name, os_key, containerd)
    wants = _wants(node, NodeStateData(raw))
    repo_paths = {p for r in REPOSITORIES for p in repos.repository_request(r).files}
    plain = [w for w in wants if isinstance(w, FileWant) and w.path not in repo_paths]
    for op, args in ((packages.wants, [w for w in wants if isinstance(w, PackageWant)]),
                     (files.wants, plain),
                     (services.wants, [w for w in wants if isinstance(w, UnitWant)]),
                     (accounts.wants, [w for w in wants if isinstance(w, GroupWant)])):
        host = FakeHost(raw, executing=True)
        assert run_op(op, host, args) == [], op
    state = NodeStateData(raw)
    if node.has_gpus:
        # The driver stage sets up the CUDA repository only for a driver it installs.
        if driver.managed(node) and driver.uses_repository(state):
            host = FakeHost(raw)
            assert run_op(repos.apt_repository, host, "cuda", CLUSTER.mirrors.cuda,
                          driver.repository_pins(node, state)) == []
        assert toolkit.runtime_missing(node, state) is None
        assert toolkit.cdi_outdated(state) is None
        assert driver.reboot_reason(node, state) is None
        assert permissions.devices_off(node, state) == []


def test_hand_edited_daemon_json_is_repaired_keeping_the_foreign_key() -> None:
    node = CLUSTER.node("l40s-01")
    raw = _after_deploy("l40s-01", "debian12", "1.7.24")
    data = json.loads(NodeStateData(raw).file(runtime.DAEMON_JSON).content or "")
    data["log-opts"]["max-size"] = "1g"
    data["registry-mirrors"] = ["https://mirror.internal"]
    raw = with_file(raw, runtime.DAEMON_JSON, dumps(data))
    host = FakeHost(raw, executing=True)
    commands_out = run_op(files.wants, host, runtime.file_wants(node, CLUSTER, NodeStateData(raw)))
    upload = next(c for c in commands_out if isinstance(c, list))
    written = json.loads(upload[1])
    assert written["registry-mirrors"] == ["https://mirror.internal"]
    assert written["log-opts"]["max-size"] == "100m"
    assert written["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    assert commands_out[1] == "cp -a /etc/docker/daemon.json /etc/docker/daemon.json.gpu-provision.bak"
    assert run_op(services.wants, host, runtime.unit_wants(node)) == [
        "systemctl reset-failed docker.service 2>/dev/null; systemctl restart docker.service"]


def test_pipeline_wants_hold_every_host_stack_want_in_stage_order() -> None:
    from gpu_provision.stages import pipeline

    node = CLUSTER.node("h200-01")
    state = NodeStateData(fresh("debian12", gpus=8))
    everything = pipeline.node_wants(node, CLUSTER, state)
    host_stack = _wants(node, state)
    positions = [everything.index(w) for w in host_stack]
    assert positions == sorted(positions)
    assert pipeline.STAGES[:5] == ["preflight", "driver", "runtime", "toolkit", "permissions"]
