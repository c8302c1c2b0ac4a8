"""What each host-stack stage wants for every example node of inventory/cluster.yaml, per OS family."""

from __future__ import annotations

from pathlib import Path

import pytest
from nodestates import fresh

from gpu_provision.desired import FileWant, GroupWant, PackageWant, UnitWant
from gpu_provision.spec import load_cluster
from gpu_provision.stages import driver, permissions, runtime, toolkit
from gpu_provision.state import NodeStateData, Request

CLUSTER = load_cluster(str(Path(__file__).resolve().parents[2] / "inventory" / "cluster.yaml"))


def _state(os_key: str, **kwargs) -> NodeStateData:  # type: ignore[no-untyped-def]
    return NodeStateData(fresh(os_key, **kwargs))


def _packages(wants) -> dict[str, tuple[str | None, bool]]:  # type: ignore[no-untyped-def]
    return {w.name: (w.version, w.held) for w in wants if isinstance(w, PackageWant)}


def _paths(wants) -> list[str]:  # type: ignore[no-untyped-def]
    return [w.path for w in wants if isinstance(w, FileWant)]


def _units(wants) -> list[str]:  # type: ignore[no-untyped-def]
    return [w.name for w in wants if isinstance(w, UnitWant)]


def test_h200_on_debian_takes_open_modules_from_the_cuda_repository_pinned_to_the_branch() -> None:
    node = CLUSTER.node("h200-01")
    wants = driver.wants(node, CLUSTER, _state("debian12", gpus=8, nvswitches=4))
    # NVIDIA's pinning package for the branch, any version of it (its name carries the driver's), not held.
    assert _packages(wants) == {
        "nvidia-driver-pinning-580": (None, False),
        "nvidia-open": ("580.*", True), "nvidia-driver": ("580.*", True),
        "nvidia-kernel-open-dkms": ("580.*", True), "nvidia-fabricmanager": ("580.*", True),
        "libnvidia-nscq": ("580.*", True)}
    assert _paths(wants) == ["/etc/apt/sources.list.d/cuda.sources", "/etc/apt/preferences.d/cuda.pref",
                             "/etc/modprobe.d/blacklist-nouveau.conf"]
    pref = next(w for w in wants if isinstance(w, FileWant) and w.path.endswith(".pref"))
    assert "Pin: version 580.*\nPin-Priority: 1001" in (pref.content or "")
    assert "URIs: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/" in (wants[0].content or "")
    assert _units(wants) == ["nvidia-persistenced.service", "nvidia-fabricmanager.service"]


def test_h200_on_ubuntu_uses_the_server_branch_packages_without_a_repository() -> None:
    wants = driver.wants(CLUSTER.node("h200-01"), CLUSTER, _state("ubuntu2404", gpus=8, nvswitches=4))
    assert _packages(wants) == {"nvidia-driver-580-server-open": (None, True),
                                "nvidia-fabricmanager-580": (None, True), "libnvidia-nscq-580": (None, True)}
    assert _paths(wants) == ["/etc/modprobe.d/blacklist-nouveau.conf"]


def test_secure_boot_on_ubuntu_takes_signed_precompiled_modules_for_the_kernel_flavour() -> None:
    wants = driver.wants(CLUSTER.node("h200-01"), CLUSTER, _state("ubuntu2404", gpus=8, secure_boot="enabled",
                                                                  nvswitches=4))
    # The flavour's metapackage follows new kernels; the running kernel's own package is what loads now.
    assert set(_packages(wants)) == {"linux-modules-nvidia-580-server-open-generic",
                                     "linux-modules-nvidia-580-server-open-6.8.0-45-generic",
                                     "nvidia-headless-no-dkms-580-server-open", "nvidia-utils-580-server",
                                     "nvidia-fabricmanager-580", "libnvidia-nscq-580"}
    arm = driver.wants(CLUSTER.node("h200-01"), CLUSTER, _state("ubuntu2204-arm", gpus=8, secure_boot="enabled"))
    assert "linux-modules-nvidia-580-server-open-nvidia-64k" in _packages(arm)


def test_rocky_gets_a_repo_file_and_versionlocked_packages() -> None:
    wants = driver.wants(CLUSTER.node("a100-01"), CLUSTER, _state("rocky9", gpus=4))
    assert _packages(wants) == {"nvidia-open": ("580.*", True), "nvidia-driver": ("580.*", True),
                                "kmod-nvidia-open-dkms": ("580.*", True)}
    repo = next(w for w in wants if isinstance(w, FileWant) and w.path == "/etc/yum.repos.d/cuda.repo")
    assert "baseurl=https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/" in (repo.content or "")
    # Fabric Manager only where the PCI bus has NVSwitches (or when the file asks for it).
    assert "nvidia-fabricmanager.service" not in _units(wants)


def test_exact_version_and_proprietary_modules() -> None:
    from dataclasses import replace

    node = CLUSTER.node("l40s-01")
    node = replace(node, driver=replace(node.driver, version="580.159.04", kernel_modules="proprietary"))
    wants = driver.wants(node, CLUSTER, _state("debian12", gpus=4))
    assert _packages(wants) == {"nvidia-driver-pinning-580.159.04": (None, False),
                                "cuda-drivers": ("580.159.04", True), "nvidia-driver": ("580.159.04", True),
                                "nvidia-kernel-dkms": ("580.159.04", True)}
    pref = next(w for w in wants if isinstance(w, FileWant) and w.path.endswith(".pref"))
    assert "Pin: version 580.159.04*" in (pref.content or "")


def _with_pinning(os_key: str, *installed: str) -> NodeStateData:
    raw = fresh(os_key, gpus=4)
    raw["packages"]["prefixed"] = {"nvidia-driver-pinning-": list(installed)}
    for name in installed:
        raw["packages"]["packages"][name] = {"version": "580.126.09-1", "held": False}
    return NodeStateData(raw)


def test_another_drivers_pinning_package_is_purged_before_the_wanted_one_and_drift_names_it() -> None:
    from dataclasses import replace

    node = CLUSTER.node("l40s-01")
    node = replace(node, driver=replace(node.driver, version="580.159.04"))
    state = _with_pinning("debian12", "nvidia-driver-pinning-580.126.09", "nvidia-driver-pinning-580")
    # Purged (a removed package's pin file would stay behind) before the wanted package is installed.
    [purge] = driver.pinning_commands(node, state)
    assert " purge nvidia-driver-pinning-580 nvidia-driver-pinning-580.126.09" in purge
    assert purge in driver.preparation_commands(node, state)
    found = [str(d) for d in driver.extra_differences(node, CLUSTER, state)]
    assert found == ["package nvidia-driver-pinning-580: expected not installed (another driver's pinning "
                     "package), found installed 580.126.09-1",
                     "package nvidia-driver-pinning-580.126.09: expected not installed (another driver's pinning "
                     "package), found installed 580.126.09-1"]
    # The wanted one alone: nothing to purge, nothing to report.
    state = _with_pinning("debian12", "nvidia-driver-pinning-580.159.04")
    assert driver.pinning_commands(node, state) == []
    assert driver.extra_differences(node, CLUSTER, state) == []
    assert "nvidia-driver-pinning-" in driver.request(node, CLUSTER).package_prefixes


@pytest.mark.parametrize("os_key", ["ubuntu2404", "rocky9"])
def test_no_pinning_package_where_the_driver_does_not_come_from_nvidias_apt_repository(os_key: str) -> None:
    node = CLUSTER.node("l40s-01")
    state = _with_pinning(os_key, "nvidia-driver-pinning-580")
    assert driver.pinning_wants(node, state) == []
    assert driver.pinning_commands(node, state) == []
    assert not any(w.name.startswith("nvidia-driver-pinning") for w in driver.wants(node, CLUSTER, state)
                   if isinstance(w, PackageWant))


def test_missing_headers_are_wanted_for_the_pending_kernel() -> None:
    raw = fresh("ubuntu2404", gpus=8)
    raw["system"]["headers"]["6.8.0-47-generic"] = False
    wants = driver.wants(CLUSTER.node("h200-01"), CLUSTER, NodeStateData(raw))
    assert _packages(wants)["linux-headers-6.8.0-47-generic"] == (None, False)
    assert "linux-headers-6.8.0-45-generic" not in _packages(wants)


def test_nodes_without_gpus_get_only_the_runtime() -> None:
    node, state = CLUSTER.node("cp-01"), _state("debian12")
    assert driver.wants(node, CLUSTER, state) == []
    assert toolkit.wants(node, CLUSTER, state) == []
    assert permissions.wants(node, CLUSTER, state) == []
    assert _packages(runtime.wants(node, CLUSTER, state)) == {"containerd.io": (None, False)}


def test_docker_node_merges_daemon_json_keys_from_the_file() -> None:
    wants = runtime.wants(CLUSTER.node("l40s-01"), CLUSTER, _state("ubuntu2404", gpus=4))
    daemon = next(w for w in wants if isinstance(w, FileWant) and w.path == "/etc/docker/daemon.json")
    assert daemon.merge == "json"
    assert daemon.keys == {"exec-opts": ["native.cgroupdriver=systemd"], "log-driver": "json-file",
                           "log-opts": {"max-size": "100m", "max-file": "3"}, "default-shm-size": "1g"}
    assert set(_packages(wants)) == {"docker-ce", "docker-ce-cli", "containerd.io"}
    assert "/etc/apt/sources.list.d/docker.sources" in _paths(wants)
    docker = next(w for w in wants if isinstance(w, UnitWant) and w.name == "docker.service")
    assert docker.restart_on == ("/etc/docker/daemon.json",)


def test_toolkit_pins_all_four_packages() -> None:
    wants = toolkit.wants(CLUSTER.node("h200-01"), CLUSTER, _state("debian12", gpus=8))
    assert _packages(wants) == {name: ("1.17.8-1", True) for name in (
        "nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
        "libnvidia-container1")}
    assert "/lib/udev/rules.d/71-nvidia-dev-char.rules" in _paths(wants)
    sources = next(w for w in wants if isinstance(w, FileWant) and w.path.endswith(".sources"))
    assert "URIs: https://nvidia.github.io/libnvidia-container/stable/deb/amd64/" in (sources.content or "")


def test_permissions_use_the_real_gid_once_the_group_exists() -> None:
    node = CLUSTER.node("a100-01")
    raw = fresh("debian12", gpus=4)
    before = permissions.wants(node, CLUSTER, NodeStateData(raw))
    assert GroupWant("gpu", ("alice", "bob")) in before
    assert "NVreg_DeviceFileGID=<gid of gpu>" in (before[-1].content or "")
    raw["accounts"]["gpu"] = {"gid": 998, "members": ["alice", "bob"]}
    after = permissions.wants(node, CLUSTER, NodeStateData(raw))
    assert after[-1].content == ("# Managed by gpu-provision: /dev/nvidia* owned by root:gpu, mode 0660\n"
                                 "options nvidia NVreg_DeviceFileUID=0 NVreg_DeviceFileGID=998 "
                                 "NVreg_DeviceFileMode=432\n")


@pytest.mark.parametrize("name", [n.name for n in CLUSTER.nodes])
@pytest.mark.parametrize("os_key", ["debian12", "ubuntu2404", "rocky9"])
def test_every_example_node_has_wants_its_request_covers(name: str, os_key: str) -> None:
    from gpu_provision.desired import request_for
    from gpu_provision.stages import pipeline

    node = CLUSTER.node(name)
    state = _state(os_key, gpus=node.gpus.count)
    request = pipeline.node_request(node, CLUSTER)
    for module in (driver, runtime, toolkit, permissions):
        needed = request_for(module.wants(node, CLUSTER, state))
        # Kernel-dependent names (headers, precompiled modules) are the only ones read on demand.
        assert needed.packages - request.packages <= {p for p in needed.packages if "linux-" in p}
        assert needed.files <= request.files and needed.units <= request.units and needed.groups <= request.groups


def test_preflight_names_a_pinning_package_the_repository_does_not_have() -> None:
    """A version published before NVIDIA's pinning packages were (or a mirror behind): preflight says so while the
    index knows other pinning packages, rather than let apt fail on the name; silent while it knows none."""
    from dataclasses import replace

    from gpu_provision.stages import preflight

    node = CLUSTER.node("l40s-01")
    node = replace(node, driver=replace(node.driver, version="580.95.05"))
    raw = fresh("debian12", gpus=4)
    raw["runtime"]["apt_names"] = {"nvidia-driver-pinning-": ["nvidia-driver-pinning-580",
                                                              "nvidia-driver-pinning-580.159.04"]}
    found = [(f.check, f.fatal, f.message) for f in preflight.findings(node, CLUSTER, NodeStateData(raw))
             if f.check == "driver-pinning"]
    assert found == [("driver-pinning", True, "NVIDIA's CUDA repository, as this node's package index knows it, has "
                      "no nvidia-driver-pinning-580.95.05 (it has nvidia-driver-pinning-580, "
                      "nvidia-driver-pinning-580.159.04): set driver.version to a version it has a pinning package "
                      "for, or give driver.branch alone")]
    raw["runtime"]["apt_names"]["nvidia-driver-pinning-"].append("nvidia-driver-pinning-580.95.05")
    assert not [f for f in preflight.findings(node, CLUSTER, NodeStateData(raw)) if f.check == "driver-pinning"]
    raw["runtime"]["apt_names"] = {}
    assert not [f for f in preflight.findings(node, CLUSTER, NodeStateData(raw)) if f.check == "driver-pinning"]
    # The probe is asked for the names through the runtime section.
    assert Request(sections={"system", "runtime"}).to_probe()["runtime"] == {"apt_prefixes": ["nvidia-driver-pinning-"]}
