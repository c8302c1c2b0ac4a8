"""NVIDIA GPU Feature Discovery (GFD): a DaemonSet beside the device plugin that labels each GPU node with what it
found (``nvidia.com/gpu.product``, ``gpu.memory``, ``mig.capable``, ``mig.strategy``, ``gpu.sharing-strategy``).

Follows NVIDIA's chart (k8s-device-plugin ``deployments/helm/nvidia-device-plugin/templates/daemonset-gfd.yml``):
the device plugin's image with the ``gpu-feature-discovery`` command, the plugin's service account and security
context, and the same config-manager containers, so GFD reads the node's own device plugin config (MIG strategy,
sharing) and its labels agree with what the plugin advertises. GFD writes its labels to a features file that Node
Feature Discovery's worker reads, or with ``kubernetes.node_feature_discovery`` through NFD's NodeFeature API; NFD
itself is the site's (see that setting). Under ``kubernetes.gpu_allocation: dra`` GFD runs where it serves, with
NFD: it then comes with the plugin's account and config but without the device plugin (:func:`without_plugin`).
"""

from __future__ import annotations

from typing import Any

from gpu_provision.k8s import device_plugin
from gpu_provision.k8s.images import with_registry
from gpu_provision.k8s.nodes import PRESENT_LABEL
from gpu_provision.k8s.objects import Obj
from gpu_provision.spec.model import Cluster

NAME = "gpu-feature-discovery"
#: Where GFD writes its labels on the node and NFD's worker reads local features.
FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
#: What GFD needs in the cluster to publish through NFD's NodeFeature API (the chart's role.yml with gfd.enabled).
NODE_FEATURE_RULES = (
    {"apiGroups": ["nfd.k8s-sigs.io"], "resources": ["nodefeatures"],
     "verbs": ["get", "list", "watch", "create", "update"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
)


def _field(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def rbac_rules(cluster: Cluster) -> list[dict[str, Any]]:
    """The rules GFD adds to the device plugin's ClusterRole: NodeFeature objects where NFD runs, else none."""
    return [dict(rule) for rule in NODE_FEATURE_RULES] if cluster.kubernetes.node_feature_discovery else []


def daemonset(cluster: Cluster) -> Obj:
    """GFD on nodes labelled ``nvidia.com/gpu.present=true`` (the chart selects NFD's PCI label; this project sets
    its own label from the file, so GFD runs where the device plugin runs, with or without NFD)."""
    image = with_registry(cluster.kubernetes.device_plugin_image, cluster.mirrors.registry)
    env: list[dict[str, Any]] = [_field("NODE_NAME", "spec.nodeName"), _field("NAMESPACE", "metadata.namespace"),
                                 _field("POD_NAME", "metadata.name"),
                                 {"name": "CONFIG_FILE", "value": "/config/config.yaml"},
                                 {"name": "FAIL_ON_INIT_ERROR", "value": "true"}]
    if device_plugin.uses_mig(cluster):
        env.append({"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"})
    if cluster.kubernetes.node_feature_discovery:
        env.append({"name": "USE_NODE_FEATURE_API", "value": "true"})
    gfd = {
        "name": f"{NAME}-ctr",
        "image": image,
        "command": ["gpu-feature-discovery"],
        "env": env,
        "securityContext": device_plugin.security_context(cluster),
        "volumeMounts": [{"name": "output-dir", "mountPath": FEATURES_DIR},
                         {"name": "host-sys", "mountPath": "/sys"},
                         {"name": "available-configs", "mountPath": "/available-configs"},
                         {"name": "config", "mountPath": "/config"}],
    }
    prefix = NAME
    pod: dict[str, Any] = {
        "serviceAccountName": device_plugin.NAME,
        "priorityClassName": "system-node-critical",
        "shareProcessNamespace": True,
        "nodeSelector": {PRESENT_LABEL: "true"},
        "tolerations": [device_plugin.GPU_TOLERATION],
        "initContainers": [device_plugin.config_manager(cluster, image, oneshot=True, name_prefix=prefix)],
        "containers": [device_plugin.config_manager(cluster, image, oneshot=False, signal_process=NAME,
                                                    name_prefix=prefix), gfd],
        "volumes": [
            {"name": "output-dir", "hostPath": {"path": FEATURES_DIR, "type": "DirectoryOrCreate"}},
            {"name": "host-sys", "hostPath": {"path": "/sys", "type": "Directory"}},
            *device_plugin.CONFIG_VOLUMES,
        ],
    }
    return device_plugin.system_daemonset(cluster, NAME, pod)


def without_plugin(cluster: Cluster) -> list[Obj]:
    """GFD beside NVIDIA's DRA driver, where its labels reach the Node (with Node Feature Discovery; without it the
    features file GFD writes has no reader): the device plugin's account and configs, which GFD reads, and GFD's
    DaemonSet, but not the device plugin, which must not serve the GPUs the DRA driver allocates."""
    if not cluster.kubernetes.node_feature_discovery:
        return []
    return [*device_plugin.rbac(rbac_rules(cluster)), device_plugin.configmap(cluster), daemonset(cluster)]
