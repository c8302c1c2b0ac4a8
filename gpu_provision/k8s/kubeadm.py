"""kubeadm configuration documents: InitConfiguration, ClusterConfiguration, KubeletConfiguration, JoinConfiguration.

kubeadm 1.31 introduced ``kubeadm.k8s.io/v1beta4`` (``extraArgs`` and ``kubeletExtraArgs`` became lists of
name/value pairs); earlier releases read ``v1beta3`` (the data file names the source). Only fields whose shape is the same in both are used, so the
documents differ in their ``apiVersion`` alone.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from gpu_provision.k8s import dra
from gpu_provision.k8s.endpoints import host_port, with_default_port
from gpu_provision.k8s.nodes import taint_objects
from gpu_provision.node.versions import at_least, version_key
from gpu_provision.spec.defaults import KUBEADM_API, KUBEADM_API_BEFORE
from gpu_provision.spec.model import Cluster, Node

CRI_SOCKET = "unix:///run/containerd/containerd.sock"
API_PORT = 6443
#: kubeadm's default image repository; ``mirrors.registry`` replaces it (images keep their names below it).
IMAGE_REPOSITORY = "registry.k8s.io"
CONTROL_PLANE_TAINT = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}


def api_version(version: str) -> str:
    """The kubeadm config API for Kubernetes ``version`` (``1.31.4`` -> ``kubeadm.k8s.io/v1beta4``): the newest
    API whose first minor (``kubernetes.kubeadm_api`` in ``gpu_provision/data/packages.json``) is not newer."""
    known = sorted(KUBEADM_API.items(), key=lambda item: version_key(item[0], 2))
    chosen = [api for first, api in known if at_least(version, first, 2)]
    return chosen[-1] if chosen else KUBEADM_API_BEFORE


def advertise_address(node: Node, probed: str | None) -> str | None:
    """The address the node's API server (or kubelet) advertises.

    ``node.address`` unless it is a loopback address (a node reached through a local forwarder), in which case the
    node's own address from the probe; None lets kubeadm pick the default-route interface.
    """
    try:
        if not ipaddress.ip_address(node.address).is_loopback:
            return node.address
    except ValueError:
        # A host name: kubeadm needs an IP to advertise, so the probed one serves.
        pass
    return probed


def endpoint(cluster: Cluster, first_address: str | None) -> str | None:
    """``host:port`` every node reaches the API server at (``control_plane_endpoint`` or the first control plane);
    an IPv6 address in brackets (``[2001:db8::10]:6443``), as kubeadm parses ``controlPlaneEndpoint``."""
    given = cluster.kubernetes.control_plane_endpoint
    if given:
        return with_default_port(given, API_PORT)
    return host_port(first_address, API_PORT) if first_address else None


def node_taints(node: Node) -> list[dict[str, str]]:
    """The taints kubeadm registers the node with: the file's, plus the control-plane taint on control planes."""
    taints = taint_objects(node.taints)
    if node.role == "control-plane" and not any(t["key"] == CONTROL_PLANE_TAINT["key"] for t in taints):
        taints.insert(0, dict(CONTROL_PLANE_TAINT))
    return taints


def _registration(node: Node) -> dict[str, Any]:
    return {"name": node.name, "criSocket": CRI_SOCKET, "taints": node_taints(node)}


def kubelet_configuration(gates: dict[str, bool] | None = None) -> dict[str, Any]:
    """KubeletConfiguration: the systemd cgroup driver (matching containerd's ``SystemdCgroup = true``), and
    ``gates`` where the cluster needs feature gates (kubeadm hands this document to every joining kubelet)."""
    out: dict[str, Any] = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                           "cgroupDriver": "systemd", "failSwapOn": True}
    if gates:
        out["featureGates"] = dict(gates)
    return out


def feature_gates(cluster: Cluster) -> dict[str, bool]:
    """The feature gates the cluster file's choices need on its Kubernetes version (DRA allocation only)."""
    k8s = cluster.kubernetes
    return dra.feature_gates(k8s.version) if k8s.dra else {}


def _gated(config: dict[str, Any], gates: dict[str, bool]) -> None:
    """Set ``feature-gates`` on the API server, controller manager and scheduler.

    The list form of ``extraArgs`` is ``v1beta4``'s; gates are only ever needed by DRA allocation, which needs a
    Kubernetes release far past 1.31, so a ``v1beta3`` document never carries them.
    """
    value = ",".join(f"{gate}={str(on).lower()}" for gate, on in sorted(gates.items()))
    for component in ("apiServer", "controllerManager", "scheduler"):
        config[component] = {"extraArgs": [{"name": "feature-gates", "value": value}]}


def init_configuration(cluster: Cluster, node: Node, address: str | None) -> list[dict[str, Any]]:
    """The documents ``kubeadm init --config`` reads on the first control plane.

    + address: the address to advertise (see :func:`advertise_address`)
    """
    k8s = cluster.kubernetes
    api = api_version(k8s.version)
    init: dict[str, Any] = {"apiVersion": api, "kind": "InitConfiguration", "nodeRegistration": _registration(node)}
    if address:
        init["localAPIEndpoint"] = {"advertiseAddress": address, "bindPort": API_PORT}
    config: dict[str, Any] = {
        "apiVersion": api,
        "kind": "ClusterConfiguration",
        "clusterName": cluster.name,
        "kubernetesVersion": f"v{k8s.version}",
        "networking": {"podSubnet": k8s.pod_cidr, "serviceSubnet": k8s.service_cidr},
        "imageRepository": (cluster.mirrors.registry or IMAGE_REPOSITORY).rstrip("/"),
    }
    cp_endpoint = endpoint(cluster, address)
    if cp_endpoint:
        config["controlPlaneEndpoint"] = cp_endpoint
    gates = feature_gates(cluster)
    if gates:
        _gated(config, gates)
    return [init, config, kubelet_configuration(gates)]


def join_configuration(cluster: Cluster, node: Node, api_endpoint: str, token: str, ca_cert_hash: str,
                       certificate_key: str | None = None, address: str | None = None) -> dict[str, Any]:
    """The JoinConfiguration for ``node``; a control plane when ``certificate_key`` is given.

    Holds the bootstrap token and certificate key, so it is built at execution time, written only to a private
    temporary file on the joining node and removed after ``kubeadm join``.
    """
    doc: dict[str, Any] = {
        "apiVersion": api_version(cluster.kubernetes.version),
        "kind": "JoinConfiguration",
        "discovery": {"bootstrapToken": {"apiServerEndpoint": api_endpoint, "token": token,
                                         "caCertHashes": [ca_cert_hash]}},
        "nodeRegistration": _registration(node),
    }
    if certificate_key is not None:
        control_plane: dict[str, Any] = {"certificateKey": certificate_key}
        if address:
            control_plane["localAPIEndpoint"] = {"advertiseAddress": address, "bindPort": API_PORT}
        doc["controlPlane"] = control_plane
    return doc
