"""The stages' own decisions: containerd's TOML, the nvidia runtime check, CDI age, reboots, device files."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import tomlkit
from nodestates import dumps, fresh, with_file

from gpu_provision.spec import load_cluster
from gpu_provision.stages import driver, permissions, runtime, toolkit
from gpu_provision.state import NodeStateData

CLUSTER = load_cluster(str(Path(__file__).resolve().parents[2] / "inventory" / "cluster.yaml"))
H200 = CLUSTER.node("h200-01")

# What Docker's containerd.io package ships (abridged): CRI disabled, comments, no version line.
CONTAINERD_IO_CONFIG = """\
#   Copyright 2018-2022 Docker Inc.

disabled_plugins = ["cri"]

#root = "/var/lib/containerd"
#state = "/run/containerd"
"""


def test_containerd_1x_config_gets_systemd_cgroups_and_keeps_the_rest() -> None:
    text = runtime.containerd_config(CONTAINERD_IO_CONFIG, 1)
    doc = tomlkit.parse(text).unwrap()
    assert doc["version"] == 2
    assert doc["disabled_plugins"] == []
    runc = doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["runc"]
    assert runc == {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": True}}
    assert "#   Copyright 2018-2022 Docker Inc." in text and '#root = "/var/lib/containerd"' in text
    # Applying it again changes nothing, byte for byte.
    assert runtime.containerd_config(text, 1) == text


def test_containerd_1x_existing_v2_settings_are_kept() -> None:
    current = ('version = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "registry.k8s.io/pause:3.10"\n'
               '\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
               '  SystemdCgroup = false\n  BinaryName = "/usr/local/bin/runc"\n')
    doc = tomlkit.parse(runtime.containerd_config(current, 1)).unwrap()
    cri = doc["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "registry.k8s.io/pause:3.10"
    assert cri["containerd"]["runtimes"]["runc"]["options"] == {"SystemdCgroup": True,
                                                                "BinaryName": "/usr/local/bin/runc"}


def test_containerd_1x_version_1_file_uses_the_short_plugin_name() -> None:
    doc = tomlkit.parse(runtime.containerd_config('[plugins.cri]\n  stream_server_port = "0"\n', 1)).unwrap()
    assert "version" not in doc
    assert doc["plugins"]["cri"]["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is True


def test_containerd_2x_imports_the_drop_in_directory() -> None:
    assert tomlkit.parse(runtime.containerd_config(None, 2)).unwrap() == {
        "version": 3, "imports": ["/etc/containerd/conf.d/*.toml"]}
    current = 'version = 3\nimports = ["/etc/containerd/site/*.toml"]\n[grpc]\n  address = "/run/c.sock"\n'
    text = runtime.containerd_config(current, 2)
    doc = tomlkit.parse(text).unwrap()
    assert doc["imports"] == ["/etc/containerd/site/*.toml", "/etc/containerd/conf.d/*.toml"]
    assert doc["grpc"] == {"address": "/run/c.sock"}
    assert runtime.containerd_config(text, 2) == text
    dropin = tomlkit.parse(runtime.containerd_dropin()).unwrap()
    assert dropin["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["runc"]["options"] == {
        "SystemdCgroup": True}


def test_containerd_files_follow_the_probed_version() -> None:
    raw = fresh("debian12")
    raw["runtime"]["containerd_version"] = "2.0.2"
    paths = [w.path for w in runtime.containerd_files(NodeStateData(raw))]
    assert paths == ["/etc/containerd/config.toml", "/etc/containerd/conf.d/10-gpu-provision.toml"]
    raw["runtime"]["containerd_version"] = "1.6.20"
    assert [w.path for w in runtime.containerd_files(NodeStateData(raw))] == ["/etc/containerd/config.toml"]


def test_nvidia_runtime_check_reads_docker_and_containerd_configs() -> None:
    docker = replace(H200, container_runtime=replace(H200.container_runtime, kind="docker"))
    raw = with_file(fresh("debian12", gpus=8), runtime.DAEMON_JSON, dumps({"log-driver": "json-file"}))
    assert toolkit.runtime_missing(docker, NodeStateData(raw)) == "daemon.json has no nvidia runtime"
    raw = with_file(raw, runtime.DAEMON_JSON, dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}))
    assert toolkit.runtime_missing(docker, NodeStateData(raw)) == "nvidia is not Docker's default runtime"
    no_default = replace(docker, toolkit=replace(docker.toolkit, default_runtime=False))
    assert toolkit.runtime_missing(no_default, NodeStateData(raw)) is None

    raw = fresh("debian12", gpus=8)
    assert toolkit.runtime_missing(H200, NodeStateData(raw)) == "containerd has no nvidia runtime"
    raw = with_file(raw, toolkit.NVIDIA_DROPIN, '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
                    'runtime_type = "io.containerd.runc.v2"\n')
    assert toolkit.runtime_missing(H200, NodeStateData(raw)) == "nvidia is not containerd's default runtime"
    raw = with_file(raw, runtime.CONTAINERD_CONFIG, '[plugins."io.containerd.grpc.v1.cri".containerd]\n'
                    'default_runtime_name = "nvidia"\n')
    assert toolkit.runtime_missing(H200, NodeStateData(raw)) is None
    assert toolkit.configure_command(H200) == (
        "nvidia-ctk runtime configure --runtime=containerd --set-as-default && "
        "{ systemctl reset-failed containerd 2>/dev/null; systemctl restart containerd; }")


def test_cdi_spec_is_regenerated_when_older_than_the_driver() -> None:
    raw = fresh("debian12", gpus=8)
    assert toolkit.cdi_outdated(NodeStateData(raw)) == "no CDI spec"
    raw["runtime"].update(cdi_spec_mtime=100, driver_installed_at=200)
    assert toolkit.cdi_outdated(NodeStateData(raw)) == "CDI spec is older than the driver"
    raw["runtime"].update(cdi_spec_mtime=300)
    assert toolkit.cdi_outdated(NodeStateData(raw)) is None


def test_reboot_reasons() -> None:
    raw = fresh("debian12", gpus=8, modules=("nouveau",))
    assert driver.reboot_reason(H200, NodeStateData(raw)) is None  # not blacklisted yet: nothing to reboot into
    raw = with_file(raw, driver.BLACKLIST, driver.BLACKLIST_TEXT)
    assert driver.reboot_reason(H200, NodeStateData(raw)) == "nouveau is loaded; it is blacklisted from the next boot on"
    raw = fresh("debian12", gpus=8)
    raw["packages"]["packages"]["nvidia-open"] = {"version": "580.159.04-1", "held": True}
    raw["gpu"]["driver_version_line"] = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.126.09  "
                                         "Release Build  (dvs-builder@U16-I3-B03-4-3)  Thu Oct 16 2025")
    assert driver.reboot_reason(H200, NodeStateData(raw)) == "driver 580.126.09 is loaded, 580.159.04 is installed"
    raw["gpu"]["driver_version_line"] = raw["gpu"]["driver_version_line"].replace("580.126.09", "580.159.04")
    assert driver.reboot_reason(H200, NodeStateData(raw)) is None


def test_a_run_that_moves_a_loaded_driver_leaves_a_reboot_pending() -> None:
    """Seen on the rig rolling 580.159.04 back to 580.126.09 with a MIG change: the MIG step ran after the install and
    before the reboot and failed with "Driver/library version mismatch". What a run reads before it changes anything
    must already say a reboot will be pending (the MIG layout waits for it); with no driver loaded, none is."""
    old = replace(H200, driver=replace(H200.driver, version="580.126.09"))
    raw = fresh("debian12", gpus=8)
    assert driver.pending_reboot(old, NodeStateData(raw)) is None  # nothing loaded: nvidia-smi loads the new one
    raw["packages"]["packages"]["nvidia-open"] = {"version": "580.159.04-1", "held": True}
    raw["gpu"]["driver_version_line"] = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  "
                                         "Release Build  (dvs-builder@U16-I3-B03-4-3)  Thu Oct 16 2025")
    state = NodeStateData(raw)
    assert driver.reboot_reason(old, state) is None
    assert driver.pending_reboot(old, state) == ("driver 580.159.04 is loaded and this run installs nvidia-open "
                                                 "580.126.09")
    assert driver.pending_reboot(replace(H200, driver=replace(H200.driver, version="580.159.04")), state) is None
    raw["gpu"]["driver_version_line"] = raw["gpu"]["driver_version_line"].replace("580.159.04", "570.86.15")
    assert driver.pending_reboot(old, NodeStateData(raw)) == "driver 570.86.15 is loaded, 580.159.04 is installed"


def test_preinstalled_driver_is_checked_not_changed() -> None:
    node = replace(H200, driver=replace(H200.driver, install_method="preinstalled", version="580.159.04"))
    raw = fresh("debian12", gpus=8)
    assert driver.wants(node, CLUSTER, NodeStateData(raw)) == []
    raw["gpu"].update(smi_rc=9, smi_error="NVIDIA-SMI has failed because it couldn't communicate with the driver")
    assert driver.preinstalled_problems(node, NodeStateData(raw)) == [
        "the driver is to be preinstalled but nvidia-smi fails: NVIDIA-SMI has failed because it couldn't "
        "communicate with the driver"]
    raw["gpu"].update(smi_rc=0, gpus=[{"driver_version": "570.172.08"}] * 8)
    assert driver.preinstalled_problems(node, NodeStateData(raw)) == [
        "preinstalled driver is 570.172.08, the file wants 580.159.04"]
    raw["gpu"]["gpus"] = [{"driver_version": "580.159.04"}] * 8
    assert driver.preinstalled_problems(node, NodeStateData(raw)) == []


def test_device_files_are_fixed_with_the_groups_id_and_instance_caps_get_read_bits() -> None:
    raw = fresh("debian12", gpus=8)
    raw["accounts"]["gpu"] = {"gid": 998, "members": []}
    raw["gpu"]["devices"] = {
        "/dev/nvidia0": {"mode": "0666", "uid": 0, "gid": 0},
        "/dev/nvidiactl": {"mode": "0660", "uid": 0, "gid": 998},
        "/dev/nvidia-modeset": {"mode": "0666", "uid": 0, "gid": 0},
        "/dev/nvidia-caps/nvidia-cap1": {"mode": "0400", "uid": 0, "gid": 0},
        "/dev/nvidia-caps/nvidia-cap21": {"mode": "0444", "uid": 0, "gid": 0},
    }
    state = NodeStateData(raw)
    assert permissions.devices_off(H200, state) == ["/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia0"]
    assert permissions.fix_devices_command(H200, state) == (
        "chown 0:998 /dev/nvidia-caps/nvidia-cap21 && chmod 0440 /dev/nvidia-caps/nvidia-cap21 && "
        "chown 0:998 /dev/nvidia0 && chmod 0660 /dev/nvidia0")
    assert [d.item for d in permissions.extra_differences(H200, CLUSTER, state)] == [
        "/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia0"]


def test_kubelet_containerd_is_configured_under_docker_when_kubernetes_is_on() -> None:
    docker_node = CLUSTER.node("l40s-01")
    assert docker_node.container_runtime.kind == "docker" and CLUSTER.kubernetes.enabled
    assert runtime.runtimes(docker_node, CLUSTER) == ("docker", "containerd")
    paths = [w.path for w in runtime.file_wants(docker_node, CLUSTER, NodeStateData(fresh("debian12", gpus=4)))]
    assert runtime.DAEMON_JSON in paths and runtime.CONTAINERD_CONFIG in paths
    command = toolkit.configure_command(docker_node, runtime.runtimes(docker_node, CLUSTER))
    assert "--runtime=docker --set-as-default" in command and "--runtime=containerd --set-as-default" in command
    raw = fresh("debian12", gpus=4)
    raw = with_file(raw, runtime.DAEMON_JSON, dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}},
                                                      "default-runtime": "nvidia"}))
    assert toolkit.runtime_missing(docker_node, NodeStateData(raw), ("docker", "containerd")) == \
        "containerd has no nvidia runtime"

    without_k8s = replace(CLUSTER, kubernetes=replace(CLUSTER.kubernetes, enabled=False))
    assert runtime.runtimes(docker_node, without_k8s) == ("docker",)
    paths = [w.path for w in runtime.file_wants(docker_node, without_k8s, NodeStateData(fresh("debian12", gpus=4)))]
    assert paths == [runtime.DAEMON_JSON]
