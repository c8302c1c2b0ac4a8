"""The kubernetes stage: wants, the probe request and the differences drift reports."""

from __future__ import annotations

from typing import Any

from gpu_provision.desired import FileWant, PackageWant, UnitWant, differences, request_for, sha256
from gpu_provision.k8s import applied, nodes
from gpu_provision.k8s.objects import content_hash, key
from gpu_provision.spec.model import Cluster
from gpu_provision.stages import kubernetes as stage
from gpu_provision.state import NodeStateData

SYSTEM = {"os_id": "debian", "os_version": "12", "codename": "bookworm", "arch": "x86_64", "swaps": [],
          "modules": [], "sysctls": dict(stage.SYSCTLS)}


def converged_state(cluster: Cluster, node_name: str) -> dict[str, Any]:
    """A probe answer in which ``node_name`` matches the file in every respect."""
    node = cluster.node(node_name)
    seed = NodeStateData({"system": SYSTEM, "packages": {"manager": "apt"},
                          "kubernetes": {"addresses": ["10.77.0.11"]}})
    wants = stage.wants(node, cluster, seed)
    files = {"/etc/fstab": {"exists": True, "type": "file", "mode": "0644", "owner": "root", "group": "root",
                            "content": "UUID=1 / ext4 defaults 0 1\n", "sha256": "x"},
             "/sys/module/overlay": {"exists": True, "type": "dir"},
             "/sys/module/br_netfilter": {"exists": True, "type": "dir"}}
    for want in wants:
        if isinstance(want, FileWant):
            files[want.path] = {"exists": True, "type": "file", "mode": want.mode, "owner": "root", "group": "root",
                                "sha256": sha256(want.content or "")}
    packages = {w.name: {"version": f"{w.version}-1.1" if w.version else "1.0-1.1", "held": True}
                for w in wants if isinstance(w, PackageWant)}
    api = {"nodes": {n.name: {"labels": nodes.labels(n), "kubelet_version": f"v{cluster.kubernetes.version}",
                              "taints": nodes.taint_objects(n.taints)} for n in cluster.nodes},
           "objects": {"/".join(key(o)): content_hash(o) for objs in applied.manifests(cluster).values()
                       for o in objs},
           "daemonsets": ["kube-flannel/kube-flannel-ds"], "cluster_version": f"v{cluster.kubernetes.version}"}
    return {"system": SYSTEM, "files": files, "packages": {"manager": "apt", "packages": packages},
            "services": {"kubelet": {"loaded": True, "enabled": "enabled", "active": "active"}},
            "kubernetes": {"addresses": ["10.77.0.11"], "admin_conf": stage.is_first(node, cluster),
                           "kubelet_conf": True, "api": api if stage.is_first(node, cluster) else None}}


def all_differences(cluster: Cluster, node_name: str, raw: dict[str, Any]) -> list[str]:
    node = cluster.node(node_name)
    state = NodeStateData(raw)
    found = differences(stage.wants(node, cluster, state), state, "kubernetes")
    found += stage.extra_differences(node, cluster, state)
    return [str(d) for d in found]


def test_converged_nodes_show_no_difference(example: Cluster) -> None:
    for name in ("cp-01", "h200-01", "vgpu-01"):
        assert all_differences(example, name, converged_state(example, name)) == [], name


def test_wants(example: Cluster) -> None:
    state = NodeStateData({"system": SYSTEM, "packages": {"manager": "apt"}, "kubernetes": {}})
    wants = stage.wants(example.node("h200-01"), example, state)
    packages = {w.name: w for w in wants if isinstance(w, PackageWant)}
    assert packages["kubeadm"] == PackageWant("kubeadm", "1.36.4", held=True)
    assert packages["kubernetes-cni"] == PackageWant("kubernetes-cni", None, held=True)
    contents = {w.path: w.content for w in wants if isinstance(w, FileWant)}
    assert contents["/etc/modules-load.d/k8s.conf"] == "overlay\nbr_netfilter\n"
    assert contents["/etc/sysctl.d/99-kubernetes.conf"] == (
        "net.bridge.bridge-nf-call-iptables = 1\nnet.bridge.bridge-nf-call-ip6tables = 1\nnet.ipv4.ip_forward = 1\n")
    assert "/etc/gpu-provision/kubernetes/teams.json" not in contents
    assert UnitWant("kubelet", enabled=True, running=None) in wants
    source = contents["/etc/apt/sources.list.d/kubernetes.sources"]
    assert "https://pkgs.k8s.io/core:/stable:/v1.36/deb/" in source
    cp = {w.path for w in stage.wants(example.node("cp-01"), example, state) if isinstance(w, FileWant)}
    assert {stage.INIT_CONFIG, "/etc/gpu-provision/kubernetes/device-plugin.json"} <= cp


def test_request_covers_what_wants_read(example: Cluster) -> None:
    empty = NodeStateData({"system": SYSTEM, "packages": {"manager": "apt"}, "kubernetes": {}})
    for node in example.nodes:
        req = stage.request(node, example)
        assert req.covers(request_for(stage.wants(node, example, empty)))
        assert "kubernetes" in req.sections and "/etc/fstab" in req.contents


def test_drift_on_a_worker(example: Cluster) -> None:
    raw = converged_state(example, "h200-01")
    raw["system"] = {**SYSTEM, "swaps": ["/swapfile"], "sysctls": {**stage.SYSCTLS, "net.ipv4.ip_forward": "0"}}
    raw["files"]["/etc/fstab"]["content"] = "/swapfile none swap sw 0 0\n"
    del raw["files"]["/sys/module/br_netfilter"]
    raw["packages"]["packages"]["kubelet"] = {"version": "1.30.2-1.1", "held": True}
    raw["kubernetes"]["kubelet_conf"] = False
    assert all_differences(example, "h200-01", raw) == [
        "package kubelet: expected 1.36.4, found 1.30.2-1.1",
        "swap active: expected off, found /swapfile",
        "swap /etc/fstab: expected no active swap entries, found /swapfile none swap sw 0 0",
        "kernel-module br_netfilter: expected loaded, found not loaded",
        "sysctl net.ipv4.ip_forward: expected 1, found 0",
        "kubeadm join: expected /etc/kubernetes/kubelet.conf present, found absent",
    ]


def test_drift_seen_from_the_api(example: Cluster) -> None:
    raw = converged_state(example, "cp-01")
    api = raw["kubernetes"]["api"]
    api["nodes"]["h200-01"]["kubelet_version"] = "v1.30.2"
    api["cluster_version"] = "v1.30.2"
    del api["nodes"]["h200-01"]["labels"]["gpu-provision/mig-layout"]
    api["nodes"]["vgpu-01"]["taints"] = []
    del api["nodes"]["l40s-01"]
    api["daemonsets"] = []
    api["objects"]["ResourceQuota/vision/gpu-quota"] = "0" * 64
    del api["objects"]["LimitRange/nlp/default-limits"]
    api["objects"]["Namespace//old-team"] = "1" * 64
    assert all_differences(example, "cp-01", raw) == [
        "k8s-version control plane: expected v1.36.4, found v1.30.2",
        "kubelet-version h200-01: expected v1.36.4, found v1.30.2",
        "k8s-label h200-01 gpu-provision/mig-layout: expected g0-6.2x1g.18gb.1x2g.35gb.1x3g.71gb_g7.off, "
        "found absent",
        "k8s-node l40s-01: expected registered, found absent",
        "k8s-taint vgpu-01 nvidia.com/vgpu-host=true:NoSchedule: expected present, found absent",
        "cni flannel: expected DaemonSet kube-flannel/kube-flannel-ds, found absent",
        "k8s-object ResourceQuota/vision/gpu-quota: expected as in the cluster file, found other content",
        "k8s-object LimitRange/nlp/default-limits: expected as in the cluster file, found absent",
        "k8s-object Namespace//old-team: expected absent (not in the cluster file), found present",
    ]
    raw["kubernetes"]["api"] = None
    raw["kubernetes"]["api_error"] = "kubectl get: connection refused"
    assert all_differences(example, "cp-01", raw) == [
        "k8s-api cp-01: expected answering, found kubectl get: connection refused"]


def test_disabled_kubernetes_wants_nothing(make_cluster) -> None:
    cluster = make_cluster("""\
        version: v1
        cluster: {name: x, kubernetes: {enabled: false}}
        nodes: [{name: a, address: 10.0.0.1, role: control-plane}]
        """)
    node = cluster.node("a")
    assert stage.wants(node, cluster, NodeStateData({})) == []
    assert stage.extra_differences(node, cluster, NodeStateData({})) == []
