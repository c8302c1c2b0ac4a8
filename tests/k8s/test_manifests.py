"""Every manifest the project applies, validated against the Kubernetes API schemas of the cluster's version."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpu_provision.k8s import applied, device_plugin, feature_discovery, monitoring, objects, teams
from gpu_provision.k8s.device_plugin_config import device_plugin_config
from gpu_provision.k8s.images import split_registry, with_registry
from gpu_provision.k8s.nodes import CONFIG_LABEL, labels
from gpu_provision.spec.model import Cluster


def schema_version(cluster: Cluster) -> str:
    return f"{cluster.kubernetes.minor}.0"


def all_objects(cluster: Cluster) -> list[dict[str, Any]]:
    return [obj for objs in applied.manifests(cluster).values() for obj in objects.as_list(objs)["items"]]


def pod_specs(cluster: Cluster) -> Iterator[tuple[str, dict[str, Any]]]:
    for obj in all_objects(cluster):
        if obj["kind"] == "DaemonSet":
            yield obj["metadata"]["name"], obj["spec"]["template"]["spec"]


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return pod.get("initContainers", []) + pod["containers"]


@pytest.fixture(params=["example", "variant"])
def cluster(request: pytest.FixtureRequest) -> Cluster:
    return request.getfixturevalue(request.param)


def test_every_manifest_is_valid_for_the_cluster_version(cluster: Cluster) -> None:
    objs = all_objects(cluster)
    assert {o["kind"] for o in objs} >= {"DaemonSet", "ConfigMap", "ResourceQuota", "Role", "LimitRange", "Namespace"}
    for obj in objs:
        # strict: unknown fields are errors too, as the API server's field validation makes them.
        kubernetes_validate.validate(obj, schema_version(cluster), strict=True)


def test_the_list_documents_are_valid_too(cluster: Cluster) -> None:
    for objs in applied.manifests(cluster).values():
        document = json.loads(objects.to_text(objects.as_list(objs)))
        assert document["kind"] == "List"
        for item in document["items"]:
            kubernetes_validate.validate(item, schema_version(cluster), strict=True)


def test_the_validator_rejects_a_wrong_manifest(example: Cluster) -> None:
    broken = copy.deepcopy(device_plugin.daemonset(example))
    broken["spec"]["template"]["spec"]["containers"][0]["securityContxt"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.31.0", strict=True)
    wrong_type = copy.deepcopy(teams.quota(example.kubernetes.teams[0]))
    wrong_type["spec"]["hard"] = ["requests.nvidia.com/gpu"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong_type, "1.31.0", strict=True)


#: The only privileged containers: NVIDIA's MPS control daemon documents needing it (see device_plugin.py).
PRIVILEGED = {("nvidia-device-plugin-mps-control-daemon", "mps-control-daemon-mounts"),
              ("nvidia-device-plugin-mps-control-daemon", "mps-control-daemon-ctr")}


def test_no_pod_is_privileged_and_only_documented_ones_add_capabilities(cluster: Cluster) -> None:
    seen = set()
    for name, pod in pod_specs(cluster):
        seen.add(name)
        assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
        for container in containers(pod):
            context = container["securityContext"]
            if (name, container["name"]) in PRIVILEGED:
                assert context == {"privileged": True}
                continue
            assert context.get("privileged") is not True, (name, container["name"])
            added = set(context.get("capabilities", {}).get("add", []))
            assert added <= {"SYS_ADMIN"}, (name, added)
            if "SYS_ADMIN" in added:
                # The API server refuses this combination.
                assert context.get("allowPrivilegeEscalation") is not False
                assert name == monitoring.NAME or device_plugin.uses_mig(cluster), (name, container["name"])
            else:
                assert context == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    mps = {"nvidia-device-plugin-mps-control-daemon"} if device_plugin.uses_mps(cluster) else set()
    assert seen == {device_plugin.NAME, feature_discovery.NAME, monitoring.NAME} | mps


def test_device_plugin_drops_every_capability_without_mig(variant: Cluster) -> None:
    assert not device_plugin.uses_mig(variant)
    pod = device_plugin.daemonset(variant)["spec"]["template"]["spec"]
    for container in containers(pod):
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_dcgm_exporter_adds_sys_admin(example: Cluster) -> None:
    container = monitoring.daemonset(example)["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"]["capabilities"]["add"] == ["SYS_ADMIN"]


def test_registry_override_reaches_every_image(variant: Cluster, example: Cluster) -> None:
    images = [c["image"] for _, pod in pod_specs(variant) for c in containers(pod)]
    assert images and all(i.startswith("registry.internal:5000/nvidia/") for i in images)
    upstream = [c["image"] for _, pod in pod_specs(example) for c in containers(pod)]
    assert all(i.startswith("nvcr.io/nvidia/") for i in upstream)


@pytest.mark.parametrize(("image", "registry", "expected"), [
    ("nvcr.io/nvidia/k8s-device-plugin:v0.17.2", None, "nvcr.io/nvidia/k8s-device-plugin:v0.17.2"),
    ("nvcr.io/nvidia/k8s-device-plugin:v0.17.2", "reg:5000", "reg:5000/nvidia/k8s-device-plugin:v0.17.2"),
    ("flannel/flannel:v0.26.4", "reg.internal", "reg.internal/flannel/flannel:v0.26.4"),
    ("busybox", "reg.internal/", "reg.internal/busybox"),
    ("localhost/x/y:1", "reg", "reg/x/y:1"),
])
def test_with_registry(image: str, registry: str | None, expected: str) -> None:
    assert with_registry(image, registry) == expected


def test_split_registry() -> None:
    assert split_registry("docker.io/library/busybox:1") == ("docker.io", "library/busybox:1")
    assert split_registry("library/busybox:1") == (None, "library/busybox:1")
    assert split_registry("host:5000/a") == ("host:5000", "a")


def test_each_gpu_node_finds_its_own_config_through_its_label(cluster: Cluster) -> None:
    data = device_plugin.configmap(cluster)["data"]
    assert "default" in data
    gpu_nodes = [n for n in cluster.nodes if n.has_gpus and not n.vgpu]
    assert gpu_nodes
    for node in gpu_nodes:
        key = labels(node)[CONFIG_LABEL]
        assert yaml.safe_load(data[key]) == device_plugin_config(node)


def test_device_plugin_configs_of_the_example(example: Cluster) -> None:
    data = {k: yaml.safe_load(v) for k, v in device_plugin.configmap(example)["data"].items()}
    assert set(data) == {"default", "mig-mixed", "mig-single", "time-slicing-4"}
    assert data["time-slicing-4"]["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert data["mig-mixed"]["flags"]["migStrategy"] == "mixed"


def test_runtime_class_and_cdi_follow_the_toolkit(example: Cluster, variant: Cluster) -> None:
    assert "runtimeClassName" not in device_plugin.daemonset(example)["spec"]["template"]["spec"]
    assert [o["kind"] for o in applied.manifests(example)["device-plugin"]][0] != "RuntimeClass"
    env = {e["name"]: e.get("value") for e in device_plugin.daemonset(example)["spec"]["template"]["spec"]
           ["containers"][1]["env"]}
    assert env["DEVICE_LIST_STRATEGY"] == "cdi-cri"
    assert env["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
    pod = device_plugin.daemonset(variant)["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    assert applied.manifests(variant)["device-plugin"][0] == {
        "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "handler": "nvidia",
        "metadata": {"name": "nvidia", "labels": objects.MANAGED_BY}}
    env = {e["name"]: e.get("value") for e in pod["containers"][1]["env"]}
    assert env["DEVICE_LIST_STRATEGY"] == "envvar"
    assert "NVIDIA_MIG_MONITOR_DEVICES" not in env


def test_team_quota_role_binding_and_limits(example: Cluster, variant: Cluster) -> None:
    vision = {o["kind"]: o for o in teams.manifests(example.kubernetes.teams[0], example.kubernetes)}
    assert vision["ResourceQuota"]["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "4", "requests.nvidia.com/mig-1g.18gb": "8", "requests.nvidia.com/mig-3g.71gb": "2"}
    assert vision["RoleBinding"]["subjects"] == [
        {"kind": "Group", "name": "vision-devs", "apiGroup": "rbac.authorization.k8s.io"}]
    assert vision["Namespace"]["metadata"]["name"] == "vision"
    assert all(o["metadata"].get("namespace") == "vision" for k, o in vision.items() if k != "Namespace")
    research = {o["kind"]: o for o in teams.manifests(variant.kubernetes.teams[0], variant.kubernetes)}
    assert research["Namespace"]["metadata"]["name"] == "research-gpu"
    assert [s["kind"] for s in research["RoleBinding"]["subjects"]] == ["User", "Group"]
    solo = [o["kind"] for o in teams.manifests(variant.kubernetes.teams[1], variant.kubernetes)]
    assert "RoleBinding" not in solo and "Role" in solo


def test_team_role_grants_only_namespaced_workload_access(example: Cluster) -> None:
    role = next(o for o in teams.manifests(example.kubernetes.teams[0], example.kubernetes) if o["kind"] == "Role")
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
        assert not {"secrets", "roles", "rolebindings"} & set(rule["resources"])
        assert "rbac.authorization.k8s.io" not in rule["apiGroups"]
        if {"resourcequotas", "limitranges"} & set(rule["resources"]):
            assert set(rule["verbs"]) <= {"get", "list", "watch"}


def test_scrape_config_lists_every_gpu_node(example: Cluster) -> None:
    doc = yaml.safe_load(monitoring.scrape_config(example))
    job = doc["scrape_configs"][0]
    assert job["job_name"] == "dcgm-exporter"
    assert [t["targets"] for t in job["static_configs"]] == [
        ["192.0.2.21:9400"], ["192.0.2.31:9400"], ["192.0.2.41:9400"]]


def test_monitoring_off_renders_nothing(make_cluster) -> None:
    cluster = make_cluster("""\
        version: v1
        cluster:
          name: quiet
          kubernetes: {monitoring: {dcgm_exporter: false}}
        nodes:
          - {name: cp, address: 10.0.0.1, role: control-plane}
          - {name: g, address: 10.0.0.2, gpus: {model: L4, count: 1}}
        """)
    assert "monitoring" not in applied.manifests(cluster)
    assert "teams" not in applied.manifests(cluster)
    assert "device-plugin" in applied.manifests(cluster)


def test_content_hash_ignores_its_own_annotation_and_sees_changes(example: Cluster) -> None:
    obj = teams.quota(example.kubernetes.teams[0])
    stamped = objects.stamped(obj)
    assert stamped["metadata"]["annotations"][objects.HASH_ANNOTATION] == objects.content_hash(obj)
    assert objects.content_hash(stamped) == objects.content_hash(obj)
    changed = copy.deepcopy(obj)
    changed["spec"]["hard"]["requests.nvidia.com/gpu"] = "5"
    assert objects.content_hash(changed) != objects.content_hash(obj)


def test_cni_manifest_source(make_cluster, tmp_path) -> None:
    from gpu_provision.k8s.cni import manifest_source

    base = """\
        version: v1
        cluster: {name: c, kubernetes: {cni: %s%s}}
        nodes: [{name: a, address: 10.0.0.1, role: control-plane}]
        """
    assert manifest_source(make_cluster(base % ("flannel", ""))).endswith("/v0.26.4/kube-flannel.yml")
    assert manifest_source(make_cluster(base % ("cilium", ""))) is None
    (tmp_path / "cni").mkdir()
    (tmp_path / "cni" / "calico.yaml").write_text("{}\n")  # a manifest file must exist when the cluster file loads
    assert manifest_source(make_cluster(base % ("calico", ", cni_manifest: cni/calico.yaml"))) == str(
        tmp_path / "cni" / "calico.yaml")
    assert manifest_source(make_cluster(base % ("calico", ", cni_manifest: 'http://m.internal/c.yaml'"))) == \
        "http://m.internal/c.yaml"


def test_mps_control_daemon_only_where_mps_is_used(example: Cluster, variant: Cluster) -> None:
    assert not device_plugin.uses_mps(example)
    assert [o["metadata"]["name"] for o in device_plugin.manifests(example) if o["kind"] == "DaemonSet"] == [
        "nvidia-device-plugin"]
    daemon = device_plugin.mps_control_daemon(variant)
    assert daemon in device_plugin.manifests(variant)
    assert daemon["spec"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/mps.capable": "true"}
    assert labels(variant.node("gpu-1"))["nvidia.com/mps.capable"] == "true"
    assert "nvidia.com/mps.capable" not in labels(example.node("l40s-01"))
