"""Node labels and taints, and the kubeadm configuration documents."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_provision.k8s import kubeadm
from gpu_provision.k8s.nodes import label_value, labels, mig_layout_summary, plugin_config_name, taint_objects
from gpu_provision.spec.model import Cluster

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def test_gpu_node_labels(example: Cluster) -> None:
    assert labels(example.node("h200-01")) == {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.product": "NVIDIA-H200",
        "nvidia.com/device-plugin.config": "mig-mixed",
        "gpu-provision/mig-layout": "g0-6.2x1g.18gb.1x2g.35gb.1x3g.71gb_g7.off",
        "topology.kubernetes.io/zone": "rack-a",
    }
    assert labels(example.node("a100-01"))["gpu-provision/mig-layout"] == "all.7x1g.10gb"
    assert "gpu-provision/mig-layout" not in labels(example.node("l40s-01"))


def test_nodes_without_schedulable_gpus_get_only_their_own_labels(example: Cluster) -> None:
    assert labels(example.node("cp-01")) == {}
    # vGPU host: its GPUs belong to VMs, so no device plugin or exporter lands there.
    assert labels(example.node("vgpu-01")) == {}


def test_plugin_config_names(example: Cluster, variant: Cluster) -> None:
    assert plugin_config_name(example.node("l40s-01")) == "time-slicing-4"
    assert plugin_config_name(variant.node("gpu-1")) == "mps-3-renamed"
    assert plugin_config_name(example.node("cp-01")) == "default"


@given(st.text(max_size=200))
def test_label_value_is_always_valid(text: str) -> None:
    value = label_value(text)
    assert len(value) <= 63 and LABEL_VALUE.match(value)


def test_label_value_keeps_short_values_and_hashes_long_ones() -> None:
    assert label_value("NVIDIA H200 NVL") == "NVIDIA-H200-NVL"
    long = label_value("x" * 100)
    assert long != label_value("x" * 101) and len(long) <= 63


def test_mig_layout_summary_without_mig(variant: Cluster) -> None:
    assert mig_layout_summary(variant.node("gpu-1")) is None


def test_taints() -> None:
    assert taint_objects(("a=b:NoSchedule", "c:NoExecute")) == [
        {"key": "a", "value": "b", "effect": "NoSchedule"}, {"key": "c", "effect": "NoExecute"}]
    with pytest.raises(ValueError, match="NoSchedule"):
        taint_objects(("a=b:Sometimes",))


@pytest.mark.parametrize(("version", "api"), [
    ("1.29.3", "kubeadm.k8s.io/v1beta3"), ("1.30.8", "kubeadm.k8s.io/v1beta3"),
    ("1.31.4", "kubeadm.k8s.io/v1beta4"), ("1.33.0", "kubeadm.k8s.io/v1beta4")])
def test_kubeadm_api_version(version: str, api: str) -> None:
    assert kubeadm.api_version(version) == api


def test_init_configuration(example: Cluster) -> None:
    init, config, kubelet = kubeadm.init_configuration(example, example.node("cp-01"), "192.0.2.10")
    assert init["apiVersion"] == config["apiVersion"] == "kubeadm.k8s.io/v1beta4"
    assert init["nodeRegistration"] == {
        "name": "cp-01", "criSocket": "unix:///run/containerd/containerd.sock",
        "taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}
    assert init["localAPIEndpoint"] == {"advertiseAddress": "192.0.2.10", "bindPort": 6443}
    assert config["kubernetesVersion"] == "v1.36.4"
    assert config["networking"] == {"podSubnet": "10.244.0.0/16", "serviceSubnet": "10.96.0.0/12"}
    assert config["controlPlaneEndpoint"] == "192.0.2.10:6443"
    assert config["imageRepository"] == "registry.k8s.io"
    assert kubelet["cgroupDriver"] == "systemd"


def test_init_configuration_of_the_variant(variant: Cluster) -> None:
    init, config, _ = kubeadm.init_configuration(variant, variant.node("cp-1"), "10.30.0.10")
    assert config["apiVersion"] == "kubeadm.k8s.io/v1beta4"
    assert config["controlPlaneEndpoint"] == "api.lab.internal:6443"
    assert config["imageRepository"] == "registry.internal:5000"
    assert init["nodeRegistration"]["taints"] == [
        {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "infra", "effect": "NoExecute"}]


def test_advertise_address(example: Cluster) -> None:
    node = example.node("cp-01")
    assert kubeadm.advertise_address(node, "10.77.0.11") == "192.0.2.10"
    from dataclasses import replace
    assert kubeadm.advertise_address(replace(node, address="127.0.10.1"), "10.77.0.11") == "10.77.0.11"
    assert kubeadm.advertise_address(replace(node, address="cp.example"), None) is None


def test_join_configurations(example: Cluster) -> None:
    worker = kubeadm.join_configuration(example, example.node("h200-01"), "192.0.2.10:6443",
                                        "abcdef.0123456789abcdef", "sha256:" + "0" * 64)
    assert worker["kind"] == "JoinConfiguration" and "controlPlane" not in worker
    assert worker["discovery"]["bootstrapToken"] == {
        "apiServerEndpoint": "192.0.2.10:6443", "token": "abcdef.0123456789abcdef",
        "caCertHashes": ["sha256:" + "0" * 64]}
    assert worker["nodeRegistration"]["taints"] == []
    control = kubeadm.join_configuration(example, example.node("cp-01"), "192.0.2.10:6443", "t", "h",
                                         certificate_key="k" * 64, address="192.0.2.12")
    assert control["controlPlane"] == {"certificateKey": "k" * 64,
                                       "localAPIEndpoint": {"advertiseAddress": "192.0.2.12", "bindPort": 6443}}
