"""The conformance suite's checks against a stand-in for testinfra's ``host`` (the rig test runs them for real).

The stand-in answers as testinfra's modules do (``package``, ``file``, ``service``, ``group``, ``check_output``)
from a dict describing one node; each test changes one thing and reads the problem the check reports.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpu_provision.conformance import checks
from gpu_provision.conformance.expect import ConformanceError, expected_for, node_for_host, probe_request
from gpu_provision.desired import FileWant, GroupWant, PackageWant, UnitWant
from gpu_provision.spec import load_cluster
from gpu_provision.stages import toolkit
from gpu_provision.state import NodeStateData

REPO = Path(__file__).resolve().parents[2]


@dataclass
class StandInHost:
    """testinfra's ``host`` as the checks use it, answering from plain data."""

    packages: dict[str, str] = field(default_factory=dict)
    held: set[str] = field(default_factory=set)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    services: dict[str, tuple[bool, bool]] = field(default_factory=dict)
    groups: dict[str, list[str]] = field(default_factory=dict)

    def package(self, name: str) -> Any:
        return SimpleNamespace(is_installed=name in self.packages, version=self.packages.get(name))

    def file(self, path: str) -> Any:
        entry = self.files.get(path)
        if entry is None:
            return SimpleNamespace(exists=False)
        content = entry.get("content", "")
        return SimpleNamespace(exists=True, is_file=entry.get("is_file", True), content_string=content,
                               sha256sum=hashlib.sha256(content.encode()).hexdigest(), mode=entry.get("mode", 0o644),
                               user=entry.get("user", "root"), group=entry.get("group", "root"),
                               uid=entry.get("uid", 0), gid=entry.get("gid", 0))

    def service(self, name: str) -> Any:
        if name not in self.services:
            return SimpleNamespace(exists=False)
        enabled, running = self.services[name]
        return SimpleNamespace(exists=True, is_enabled=enabled, is_running=running)

    def group(self, name: str) -> Any:
        return SimpleNamespace(exists=name in self.groups, members=self.groups.get(name, []))

    def check_output(self, command: str) -> str:
        assert command == "apt-mark showhold"
        return "\n".join(sorted(self.held))


def test_package_version_and_hold() -> None:
    host = StandInHost(packages={"nvidia-driver": "580.159.04-1"}, held={"nvidia-driver"})
    want = PackageWant("nvidia-driver", "580.*", held=True)
    assert checks.want_problems(host, [want], "apt") == []
    host.held.clear()
    assert checks.want_problems(host, [want], "apt") == ["package nvidia-driver: expected held, found not held"]
    host.packages["nvidia-driver"] = "575.64-1"
    assert checks.want_problems(host, [want], "apt") == ["package nvidia-driver: expected 580.*, found 575.64-1"]
    del host.packages["nvidia-driver"]
    assert checks.want_problems(host, [want], "apt") == ["package nvidia-driver: expected 580.*, found absent"]


def test_held_rpm_packages_come_from_the_version_lock_list() -> None:
    host = StandInHost(packages={"nvidia-driver": "580.159.04-1.el9"},
                       files={checks.VERSIONLOCK: {"content": "nvidia-driver-3:580.159.04-1.el9.*\n"}})
    assert checks.want_problems(host, [PackageWant("nvidia-driver", held=True)], "dnf") == []
    host.files[checks.VERSIONLOCK]["content"] = ""
    assert checks.want_problems(host, [PackageWant("nvidia-driver", held=True)], "dnf") == [
        "package nvidia-driver: expected held, found not held"]


def test_file_content_mode_and_owner() -> None:
    want = FileWant("/etc/gpu-provision/mig-layout.yaml", content="version: v1\n", mode="0644")
    host = StandInHost(files={want.path: {"content": "version: v1\n"}})
    assert checks.want_problems(host, [want], "apt") == []
    host.files[want.path].update(content="version: v2\n", mode=0o600, group="gpu")
    wanted, found = (hashlib.sha256(text).hexdigest()[:12] for text in (b"version: v1\n", b"version: v2\n"))
    assert checks.want_problems(host, [want], "apt") == [
        f"file {want.path}: expected sha256 {wanted}, found {found}",
        f"file {want.path}: expected mode 0644, found 0600",
        f"file {want.path}: expected group root, found gpu"]
    del host.files[want.path]
    assert checks.want_problems(host, [want], "apt") == [f"file {want.path}: expected present, found absent"]


def test_json_merge_files_keep_foreign_keys() -> None:
    want = FileWant("/etc/docker/daemon.json", merge="json", keys={"log-opts": {"max-size": "100m"}})
    text = json.dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}, "log-opts": {"max-size": "100m"}})
    host = StandInHost(files={want.path: {"content": text}})
    assert checks.want_problems(host, [want], "apt") == []
    host.files[want.path]["content"] = json.dumps({"log-opts": {"max-size": "10m"}})
    assert checks.want_problems(host, [want], "apt") == [
        'file /etc/docker/daemon.json: expected to contain {"log-opts": {"max-size": "100m"}}, found other content']


def test_services_and_groups() -> None:
    host = StandInHost(services={"kubelet": (True, False)}, groups={"gpu": ["alice"]})
    wants = [UnitWant("kubelet", enabled=True, running=None), UnitWant("docker.service"),
             GroupWant("gpu", ("alice", "bob"))]
    assert checks.want_problems(host, wants, "apt") == [
        "service docker.service: expected installed, found missing",
        "group gpu: expected members bob, found alice"]
    host.services["kubelet"] = (False, True)
    assert checks.want_problems(host, wants[:1], "apt") == ["service kubelet: expected enabled, found disabled"]


def test_device_files_owner_group_and_mode() -> None:
    host = StandInHost(files={"/dev/nvidia0": {"gid": 44, "mode": 0o660}, "/dev/nvidiactl": {"gid": 0, "mode": 0o666}})
    devices = {"/dev/nvidia0": (44, 0o660), "/dev/nvidiactl": (44, 0o660), "/dev/nvidia1": (44, 0o660)}
    assert checks.device_problems(host, devices) == [
        "device /dev/nvidia1: expected present, found absent",
        "device /dev/nvidiactl: expected uid 0 gid 44 mode 0660, found uid 0 gid 0 mode 0666"]


def test_nvidia_runtime_reads_the_runtime_configuration_through_the_host() -> None:
    cluster = load_cluster(REPO / "inventory" / "cluster.yaml")
    node = next(n for n in cluster.nodes if n.has_gpus and n.container_runtime.kind == "docker")
    config = {"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}, "default-runtime": "nvidia"}
    host = StandInHost(files={"/etc/docker/daemon.json": {"content": json.dumps(config)}})
    assert checks.nvidia_runtime_problems(host, node, ("docker",)) == []
    host.files["/etc/docker/daemon.json"]["content"] = "{}"
    expected = toolkit.runtime_missing(node, NodeStateData({"files": {"/etc/docker/daemon.json": {
        "exists": True, "content": "{}"}}}), ("docker",))
    assert checks.nvidia_runtime_problems(host, node, ("docker",)) == [f"container runtime docker: {expected}"]


def test_a_host_is_matched_by_name_or_address_or_named() -> None:
    cluster = load_cluster(REPO / "inventory" / "cluster.yaml")
    first = cluster.nodes[0]
    assert node_for_host(cluster, first.name) is first and node_for_host(cluster, first.address) is first
    assert node_for_host(cluster, "local", named=first.name) is first
    with pytest.raises(ConformanceError, match="host 'elsewhere' is no node of the cluster file .* name the node "
                                               "with --cluster-node NAME"):
        node_for_host(cluster, "elsewhere")


def test_expectations_are_the_stages_wants() -> None:
    """Driver packages pinned and held, the permissions' device targets, the nvidia runtime: from the stages."""
    cluster = load_cluster(REPO / "inventory" / "cluster.yaml")
    node = next(n for n in cluster.nodes if n.has_gpus and n.driver.install_method == "package")
    request = probe_request(node, cluster)
    assert request.contents == request.files and "packages" in request.to_probe()
    state = NodeStateData({"system": {"os_id": "debian", "kernel": "6.1.0-18-amd64"},
                           "packages": {"manager": "apt", "packages": {}}})
    expected = expected_for(node, cluster, state)
    assert list(expected.by_stage) == ["preflight", "driver", "runtime", "toolkit", "permissions", "mig",
                                       "kubernetes"]
    driver_packages = [w for w in expected.by_stage["driver"] if isinstance(w, PackageWant)]
    # Every driver package held; NVIDIA's pinning package (an apt preferences file) installed, as its guide has it.
    pinning = [w for w in driver_packages if w.name.startswith("nvidia-driver-pinning-")]
    assert [(w.name, w.held) for w in pinning] == [("nvidia-driver-pinning-580", False)]
    assert driver_packages and all(w.held for w in driver_packages if w.name.startswith("nvidia") and w not in pinning)
    assert expected.package_manager == "apt" and expected.nvidia_runtimes


def test_a_host_without_a_service_manager_gets_a_problem_not_a_traceback() -> None:
    """testinfra's generic ``Service`` (its choice where systemd is not running, as on a real H200 host seen without
    systemd) raises NotImplementedError for every property; the suite names that instead of failing with it."""
    from testinfra.modules.service import Service

    class NoInitHost(StandInHost):
        def service(self, name: str) -> Any:
            return Service(name)

    problems = checks.want_problems(NoInitHost(), [UnitWant("containerd.service")], "apt")
    assert problems == ["service containerd.service: expected installed, found no service manager testinfra can "
                        "read (systemd is not running on this host)"]
