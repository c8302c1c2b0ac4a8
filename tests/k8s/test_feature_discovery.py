"""GPU Feature Discovery beside the device plugin: NVIDIA's DaemonSet shape, the plugin's image (mirror and digest
follow it), the plugin's per-node config, and NFD's NodeFeature API only where NFD runs."""

from __future__ import annotations

from dataclasses import replace

from gpu_provision.k8s import applied, device_plugin, feature_discovery
from gpu_provision.spec.model import Cluster

DIGEST = "nvcr.io/nvidia/k8s-device-plugin:v0.20.0@sha256:" + "a" * 64


def _container(ds: dict, name: str) -> dict:
    return next(c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == name)


def test_gfd_runs_the_plugin_image_with_its_command_where_the_plugin_runs(example: Cluster) -> None:
    ds = feature_discovery.daemonset(example)
    plugin = device_plugin.daemonset(example)
    gfd = _container(ds, "gpu-feature-discovery-ctr")
    assert gfd["command"] == ["gpu-feature-discovery"]
    assert gfd["image"] == _container(plugin, "nvidia-device-plugin-ctr")["image"]
    pod = ds["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == plugin["spec"]["template"]["spec"]["nodeSelector"]
    assert pod["serviceAccountName"] == device_plugin.NAME
    assert {"name": "CONFIG_FILE", "value": "/config/config.yaml"} in gfd["env"]
    assert {v["name"] for v in pod["volumes"]} >= {"output-dir", "host-sys", "available-configs", "config"}
    sidecar = _container(ds, "gpu-feature-discovery-sidecar")
    assert {"name": "PROCESS_TO_SIGNAL", "value": "gpu-feature-discovery"} in sidecar["env"]
    assert ds in applied.manifests(example)["device-plugin"]


def test_gfd_image_follows_the_mirror_and_the_digest(example: Cluster) -> None:
    cluster = replace(example, kubernetes=replace(example.kubernetes, device_plugin_image=DIGEST),
                      mirrors=replace(example.mirrors, registry="registry.internal:5000"))
    gfd = _container(feature_discovery.daemonset(cluster), "gpu-feature-discovery-ctr")
    assert gfd["image"] == "registry.internal:5000/nvidia/k8s-device-plugin:v0.20.0@sha256:" + "a" * 64


def test_node_feature_api_only_where_nfd_runs(example: Cluster) -> None:
    assert example.kubernetes.node_feature_discovery is False
    env = _container(feature_discovery.daemonset(example), "gpu-feature-discovery-ctr")["env"]
    assert "USE_NODE_FEATURE_API" not in {e["name"] for e in env}
    assert feature_discovery.rbac_rules(example) == []
    nfd = replace(example, kubernetes=replace(example.kubernetes, node_feature_discovery=True))
    env = _container(feature_discovery.daemonset(nfd), "gpu-feature-discovery-ctr")["env"]
    assert {"name": "USE_NODE_FEATURE_API", "value": "true"} in env
    role = next(o for o in applied.manifests(nfd)["device-plugin"] if o["kind"] == "ClusterRole")
    assert any("nodefeatures" in rule["resources"] for rule in role["rules"])
