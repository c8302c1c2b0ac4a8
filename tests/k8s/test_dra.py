"""GPU allocation through NVIDIA's DRA driver: its objects, the teams' claim templates and quota, the feature gates,
and the device plugin's absence."""

from __future__ import annotations

import kubernetes_validate
import pytest

from gpu_provision.k8s import applied, claims, dra, kubeadm, objects, teams
from gpu_provision.spec.model import Cluster

DRA_CLUSTER = """\
version: v1
cluster:
  name: dra
  kubernetes:
    version: "{version}"
    gpu_allocation: dra
    dra_driver_image: "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.1@sha256:{digest}"
    teams:
      - {{name: research, gpus: 2, mig: {{"1g.18gb": 3, "3g.71gb": 1, "1g.18gb+me": 1}}}}
      - {{name: solo, gpus: 1}}
  mirrors:
    registry: registry.internal:5000
nodes:
  - {{name: cp-1, address: 10.30.0.10, role: control-plane}}
  - name: gpu-1
    address: 10.30.0.11
    gpus: {{model: H200, count: 2}}
    mig:
      layout: {{"1g.18gb": 7}}
      gpus:
        "1": {{enabled: false}}
"""
DIGEST = "ab" * 32


@pytest.fixture(params=["1.35.9", "1.36.4", "1.37.1"])
def cluster(request: pytest.FixtureRequest, make_cluster) -> Cluster:
    return make_cluster(DRA_CLUSTER.format(version=request.param, digest=DIGEST))


def _objects(cluster: Cluster) -> list[dict]:
    return [o for objs in applied.manifests(cluster).values() for o in objects.as_list(objs)["items"]]


def _named(cluster: Cluster, kind: str) -> dict[tuple[str, str], dict]:
    return {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in _objects(cluster)
            if o["kind"] == kind}


def test_every_dra_object_is_valid_for_the_cluster_version(cluster: Cluster) -> None:
    # kubernetes-validate ships resource.k8s.io/v1 for 1.34 and newer, DeviceClass.spec.extendedResourceName included.
    for obj in _objects(cluster):
        kubernetes_validate.validate(obj, f"{cluster.kubernetes.minor}.0", strict=True)


def test_the_device_plugin_is_absent(cluster: Cluster) -> None:
    manifests = applied.manifests(cluster)
    assert "device-plugin" not in manifests and "dra-driver" in manifests
    names = {o["metadata"]["name"] for o in _objects(cluster)}
    assert not any(n.startswith("nvidia-device-plugin") for n in names)


def test_the_driver_classes_select_by_device_type_and_gpu_serves_nvidia_com_gpu(cluster: Cluster) -> None:
    classes = {name: o["spec"] for (_, name), o in _named(cluster, "DeviceClass").items()}
    assert classes["gpu.nvidia.com"] == {
        "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && "
                                             "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}],
        "extendedResourceName": "nvidia.com/gpu"}
    assert "type == 'mig'" in classes["mig.nvidia.com"]["selectors"][0]["cel"]["expression"]
    assert "type == 'vfio'" in classes["vfio.gpu.nvidia.com"]["selectors"][0]["cel"]["expression"]
    assert "extendedResourceName" not in classes["mig.nvidia.com"]
    one = classes["mig-1g-18gb.gpu.nvidia.com"]
    assert one["extendedResourceName"] == "nvidia.com/mig-1g.18gb"
    assert one["selectors"][0]["cel"]["expression"].endswith("profile == '1g.18gb'")
    # '+' cannot be in an extended resource name: the class serves claims only.
    assert "extendedResourceName" not in classes["mig-1g-18gb-plus-me.gpu.nvidia.com"]
    served = [s["extendedResourceName"] for s in classes.values() if "extendedResourceName" in s]
    assert len(served) == len(set(served)), "one class per extended resource name"


def test_plugin_image_comes_through_the_mirror_with_its_digest(cluster: Cluster) -> None:
    ds = _named(cluster, "DaemonSet")[("kube-system", dra.PLUGIN)]
    pod = ds["spec"]["template"]["spec"]
    images = {c["image"] for c in pod["initContainers"] + pod["containers"]}
    assert images == {f"registry.internal:5000/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.1@sha256:{DIGEST}"}
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["serviceAccountName"] == dra.PLUGIN
    binding = _named(cluster, "ClusterRoleBinding")[("", dra.PLUGIN)]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": dra.PLUGIN, "namespace": "kube-system"}]
    role = _named(cluster, "ClusterRole")[("", dra.PLUGIN)]
    assert {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
            "verbs": ["get", "list", "watch", "create", "update", "delete"]} in role["rules"]


def test_claim_templates_per_team_whole_gpu_and_profile(cluster: Cluster) -> None:
    templates = _named(cluster, "ResourceClaimTemplate")
    assert set(templates) == {("research", "gpu"), ("research", "mig-1g-18gb"), ("research", "mig-3g-71gb"),
                              ("research", "mig-1g-18gb-plus-me"), ("solo", "gpu")}
    request = templates[("research", "mig-3g-71gb")]["spec"]["spec"]["devices"]["requests"]
    assert request == [{"name": "gpu", "exactly": {"deviceClassName": "mig-3g-71gb.gpu.nvidia.com"}}]
    whole = templates[("solo", "gpu")]["spec"]["spec"]["devices"]["requests"]
    assert whole == [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
    assert templates[("solo", "gpu")]["apiVersion"] == "resource.k8s.io/v1"


def test_quota_counts_devices_per_class_and_closes_the_generic_classes(cluster: Cluster) -> None:
    research = _named(cluster, "ResourceQuota")[("research", "gpu-quota")]["spec"]["hard"]
    assert research[claims.quota_key("gpu.nvidia.com")] == "2"
    assert research[claims.quota_key("mig-1g-18gb.gpu.nvidia.com")] == "3"
    assert research[claims.quota_key("mig-3g-71gb.gpu.nvidia.com")] == "1"
    assert research[claims.quota_key("mig.nvidia.com")] == "0"
    assert research[claims.quota_key("vfio.gpu.nvidia.com")] == "0"
    assert research["requests.nvidia.com/gpu"] == "2"
    assert research["requests.nvidia.com/mig-1g.18gb"] == "3"
    solo = _named(cluster, "ResourceQuota")[("solo", "gpu-quota")]["spec"]["hard"]
    assert solo[claims.quota_key("gpu.nvidia.com")] == "1"
    # Another team's profiles are closed to this one.
    assert solo[claims.quota_key("mig-1g-18gb.gpu.nvidia.com")] == "0"
    assert claims.quota_key("gpu.nvidia.com") == "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"


def test_team_role_may_use_claims(cluster: Cluster) -> None:
    role = _named(cluster, "Role")[("solo", teams.ROLE)]
    assert claims.RULES[0] in role["rules"] and claims.RULES[1] in role["rules"]


def test_feature_gate_only_where_the_version_needs_it(cluster: Cluster) -> None:
    docs = kubeadm.init_configuration(cluster, cluster.nodes[0], "10.30.0.10")
    config, kubelet = docs[1], docs[2]
    if cluster.kubernetes.minor == "1.35":
        gate = [{"name": "feature-gates", "value": "DRAExtendedResource=true"}]
        assert all(config[c]["extraArgs"] == gate for c in ("apiServer", "controllerManager", "scheduler"))
        assert kubelet["featureGates"] == {"DRAExtendedResource": True}
    else:
        assert "apiServer" not in config and "featureGates" not in kubelet


def test_device_plugin_mode_keeps_its_objects_and_no_gates(example: Cluster) -> None:
    assert example.kubernetes.gpu_allocation == "device-plugin" and not example.kubernetes.dra
    manifests = applied.manifests(example)
    assert "device-plugin" in manifests and "dra-driver" not in manifests
    kinds = {o["kind"] for objs in manifests.values() for o in objs}
    assert not kinds & {"DeviceClass", "ResourceClaimTemplate"}
    assert "featureGates" not in kubeadm.init_configuration(example, example.nodes[0], "192.0.2.10")[2]


def test_quota_counts_claims_by_kubernetes_object_count_key(cluster: Cluster) -> None:
    """Kubernetes charges every ResourceClaim as one ``count/resourceclaims.resource.k8s.io`` (its quota
    evaluator; ``resourceclaims`` alone is no alias): a team may hold as many claims as devices."""
    research = _named(cluster, "ResourceQuota")[("research", "gpu-quota")]["spec"]["hard"]
    assert research["count/resourceclaims.resource.k8s.io"] == "7"  # 2 GPUs, 3 + 1 + 1 MIG devices
    solo = _named(cluster, "ResourceQuota")[("solo", "gpu-quota")]["spec"]["hard"]
    assert solo["count/resourceclaims.resource.k8s.io"] == "1"
    assert not [key for q in _named(cluster, "ResourceQuota").values() for key in q["spec"]["hard"]
                if "resourceclaims" in key and key != "count/resourceclaims.resource.k8s.io"]


def test_the_plugin_pods_carry_the_label_the_mig_applier_restarts_them_by(cluster: Cluster) -> None:
    from gpu_provision.node.mig.holders import DRA_PLUGIN_LABEL

    (daemonset,) = [o for o in _objects(cluster) if o["kind"] == "DaemonSet" and o["metadata"]["name"] == dra.PLUGIN]
    key, value = DRA_PLUGIN_LABEL
    assert daemonset["spec"]["template"]["metadata"]["labels"][key] == value
    assert daemonset["spec"]["selector"]["matchLabels"] == {key: value}


def test_with_nfd_gfd_runs_beside_the_dra_driver_without_the_device_plugin(cluster: Cluster, make_cluster) -> None:
    """GPU Feature Discovery serves under DRA where NFD carries its labels to the Node; the device plugin's
    DaemonSet never comes with it."""
    text = DRA_CLUSTER.format(version=cluster.kubernetes.version, digest=DIGEST).replace(
        "    gpu_allocation: dra\n", "    gpu_allocation: dra\n    node_feature_discovery: true\n")
    with_nfd = make_cluster(text)
    driver = applied.manifests(with_nfd)["dra-driver"]
    daemonsets = [o["metadata"]["name"] for o in driver if o["kind"] == "DaemonSet"]
    assert daemonsets == [dra.PLUGIN, "gpu-feature-discovery"]
    assert "device-plugin" not in applied.manifests(with_nfd)
    assert {(o["kind"], o["metadata"]["name"]) for o in driver} >= {
        ("ConfigMap", "nvidia-device-plugin-configs"), ("ServiceAccount", "nvidia-device-plugin")}
    for obj in driver:
        kubernetes_validate.validate(obj, f"{with_nfd.kubernetes.minor}.0", strict=True)
    # Without NFD nothing would read GFD's features file: GFD is left out.
    assert [o["metadata"]["name"] for o in applied.manifests(cluster)["dra-driver"]
            if o["kind"] == "DaemonSet"] == [dra.PLUGIN]
