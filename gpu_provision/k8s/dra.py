"""NVIDIA's DRA driver for GPUs: the kubelet plugin DaemonSet, its RBAC, the DeviceClasses and the feature gates.

Follows the shapes of the driver's own chart (kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1,
``deployments/helm/dra-driver-nvidia-gpu``) with GPU allocation on and ComputeDomains off: ComputeDomains need
their CRDs and multi-node NVLink, and the chart's controller Deployment runs only the ComputeDomain controller, so
without them there is no controller to run. The plugin publishes each node's GPUs (or, with MIG on, its MIG
devices) in ResourceSlices; the DeviceClasses select them by the driver's ``type`` and ``profile`` attributes.
Facts taken from the chart are kept in ``gpu_provision/data/dra.json`` with their source.
"""

from __future__ import annotations

import re
from typing import Any

from gpu_provision.k8s.device_plugin import GPU_TOLERATION
from gpu_provision.k8s.images import with_registry
from gpu_provision.k8s.nodes import PRESENT_LABEL
from gpu_provision.k8s.objects import Obj, meta
from gpu_provision.node.mig.holders import DRA_PLUGIN_LABEL
from gpu_provision.node.versions import version_key
from gpu_provision.spec.dradata import DATA, DEVICE_CLASSES, DRIVER_NAME
from gpu_provision.spec.model import Cluster, Kubernetes
from gpu_provision.spec.namespaces import SYSTEM

NAMESPACE = SYSTEM
NAME = "dra-driver-nvidia-gpu"
PLUGIN = f"{NAME}-kubelet-plugin"
API = "resource.k8s.io/v1"
GPU_CLASS, MIG_CLASS = "gpu.nvidia.com", "mig.nvidia.com"
_DRIVER = DATA["driver"]
#: A name an extended resource may carry after ``nvidia.com/`` (a qualified name's second part).
_RESOURCE_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _selector(device_type: str, profile: str | None = None) -> list[dict[str, Any]]:
    """The CEL selector of a device type (and MIG profile) published by the driver."""
    expression = (f"device.driver == '{DRIVER_NAME}' && "
                  f"device.attributes['{DRIVER_NAME}'].type == '{device_type}'")
    if profile:
        expression += f" && device.attributes['{DRIVER_NAME}'].profile == '{profile}'"
    return [{"cel": {"expression": expression}}]


def profile_class(profile: str) -> str:
    """The DeviceClass of one MIG profile (``1g.18gb`` -> ``mig-1g-18gb.gpu.nvidia.com``, the driver's naming in
    its extended-resource example; ``+`` becomes ``-plus-`` so ``+me`` and ``-me`` profiles stay apart)."""
    return f"mig-{profile.replace('+', '-plus-').replace('.', '-')}.{GPU_CLASS}"


def profile_resource(profile: str) -> str | None:
    """``nvidia.com/mig-<profile>`` (the device plugin's ``mixed`` name), or None where the profile's name cannot be
    an extended resource name (``+`` is not allowed in one)."""
    name = f"mig-{profile}"
    return f"nvidia.com/{name}" if _RESOURCE_NAME.match(name) else None


def team_profiles(k8s: Kubernetes) -> list[str]:
    """Every MIG profile some team may use, sorted: each gets its own DeviceClass, so quota can count it."""
    return sorted({p for team in k8s.teams for p in team.mig})


def device_classes(k8s: Kubernetes) -> list[Obj]:
    """The chart's DeviceClasses (``gpu.nvidia.com`` serves plain ``nvidia.com/gpu`` requests through its
    ``extendedResourceName``) and one per MIG profile a team uses, serving ``nvidia.com/mig-<profile>``."""
    out: list[Obj] = []
    for name, facts in sorted(DEVICE_CLASSES.items()):
        spec: dict[str, Any] = {"selectors": _selector(facts["type"])}
        if facts.get("extended_resource_name"):
            spec["extendedResourceName"] = facts["extended_resource_name"]
        out.append({"apiVersion": API, "kind": "DeviceClass", "metadata": meta(name), "spec": spec})
    for profile in team_profiles(k8s):
        spec = {"selectors": _selector("mig", profile)}
        resource = profile_resource(profile)
        if resource:
            spec["extendedResourceName"] = resource
        out.append({"apiVersion": API, "kind": "DeviceClass", "metadata": meta(profile_class(profile)), "spec": spec})
    return out


def class_names(k8s: Kubernetes) -> list[str]:
    """Every DeviceClass this project renders, by name."""
    return [obj["metadata"]["name"] for obj in device_classes(k8s)]


def feature_gates(version: str) -> dict[str, bool]:
    """The Kubernetes feature gates DRA allocation needs on ``version`` (empty where the defaults serve)."""
    return {gate: True for gate, facts in DATA["feature_gates"].items()
            if version_key(version) < version_key(facts["set_below"])}


def rbac() -> list[Obj]:
    """The kubelet plugin's ServiceAccount, ClusterRole and binding: it reads claims, pods and its Node and writes
    its node's ResourceSlices (the chart's rules without the ComputeDomain ones)."""
    read = ["get", "list", "watch"]
    rules = [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": read},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
         "verbs": [*read, "create", "update", "delete"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": [*read, "update"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": read},
    ]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(PLUGIN, NAMESPACE)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta(PLUGIN),
         "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta(PLUGIN),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": PLUGIN},
         "subjects": [{"kind": "ServiceAccount", "name": PLUGIN, "namespace": NAMESPACE}]},
    ]


def _env(image: str) -> list[dict[str, Any]]:
    plain = {"LOG_VERBOSITY": "4", "MASK_NVIDIA_DRIVER_PARAMS": "false", "NVIDIA_DRIVER_ROOT": "/",
             # The plugin runs under runc: "void" keeps a default NVIDIA runtime from injecting every GPU.
             "NVIDIA_VISIBLE_DEVICES": "void", "CDI_ROOT": "/var/run/cdi", "NVIDIA_MIG_CONFIG_DEVICES": "all",
             "IMAGE_NAME": image, "KUBELET_REGISTRAR_DIRECTORY_PATH": _DRIVER["kubelet_registrar_dir"],
             "KUBELET_PLUGINS_DIRECTORY_PATH": _DRIVER["kubelet_plugins_dir"],
             "HEALTHCHECK_PORT": str(_DRIVER["healthcheck_port"])}
    fields = {"NODE_NAME": "spec.nodeName", "NAMESPACE": "metadata.namespace",
              "SERVICE_ACCOUNT_NAME": "spec.serviceAccountName"}
    return ([{"name": k, "value": v} for k, v in plain.items()]
            + [{"name": k, "valueFrom": {"fieldRef": {"fieldPath": v}}} for k, v in fields.items()])


def daemonset(cluster: Cluster) -> Obj:
    """The kubelet plugin on nodes labelled ``nvidia.com/gpu.present=true``.

    Privileged, as the chart runs it: the plugin creates MIG and GPU device nodes, writes CDI specs under
    /var/run/cdi and mounts the host's driver root; the init container waits for the driver to be loaded.
    """
    image = with_registry(cluster.kubernetes.dra_driver_image, cluster.mirrors.registry)
    registrar, plugins = _DRIVER["kubelet_registrar_dir"], _DRIVER["kubelet_plugins_dir"]
    port = _DRIVER["healthcheck_port"]
    probe = {"grpc": {"port": port, "service": "liveness"}, "timeoutSeconds": 10}
    gpus = {
        "name": "gpus", "image": image, "securityContext": {"privileged": True},
        "command": ["gpu-kubelet-plugin"], "args": ["-v", "$(LOG_VERBOSITY)"],
        "env": _env(image),
        "startupProbe": {**probe, "failureThreshold": 600, "periodSeconds": 1},
        "livenessProbe": {**probe, "failureThreshold": 3, "periodSeconds": 30},
        "volumeMounts": [
            {"name": "plugins-registry", "mountPath": registrar},
            {"name": "plugins", "mountPath": plugins, "mountPropagation": "Bidirectional"},
            {"name": "cdi", "mountPath": "/var/run/cdi"},
            {"name": "driver-root", "mountPath": "/driver-root", "mountPropagation": "HostToContainer"},
        ],
    }
    init = {
        "name": "init-container", "image": image, "securityContext": {"privileged": True},
        "command": ["bash", "/usr/bin/kubelet-plugin-prestart.sh"],
        "env": [e for e in _env(image) if e["name"] in ("NVIDIA_DRIVER_ROOT", "NVIDIA_VISIBLE_DEVICES",
                                                         "KUBELET_REGISTRAR_DIRECTORY_PATH",
                                                         "KUBELET_PLUGINS_DIRECTORY_PATH")],
        "volumeMounts": [{"name": "driver-root-parent", "mountPath": "/driver-root-parent", "readOnly": True}],
    }
    # The node's MIG applier finds the plugin's pods by this label to restart them after a MIG change.
    selector = dict([DRA_PLUGIN_LABEL])
    pod = {
        "serviceAccountName": PLUGIN,
        "priorityClassName": "system-node-critical",
        "nodeSelector": {PRESENT_LABEL: "true"},
        "tolerations": [GPU_TOLERATION],
        "initContainers": [init],
        "containers": [gpus],
        "volumes": [
            {"name": "plugins-registry", "hostPath": {"path": registrar}},
            {"name": "plugins", "hostPath": {"path": plugins}},
            {"name": "cdi", "hostPath": {"path": "/var/run/cdi"}},
            {"name": "driver-root-parent", "hostPath": {"path": "/", "type": "DirectoryOrCreate"}},
            {"name": "driver-root", "hostPath": {"path": "/", "type": "DirectoryOrCreate"}},
        ],
    }
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta(PLUGIN, NAMESPACE, selector),
        "spec": {"selector": {"matchLabels": selector},
                 "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
                 "template": {"metadata": {"labels": selector}, "spec": pod}},
    }


def manifests(cluster: Cluster) -> list[Obj]:
    """Every object of the DRA driver, in apply order: classes first, so claims never name a missing class."""
    return [*device_classes(cluster.kubernetes), *rbac(), daemonset(cluster)]
