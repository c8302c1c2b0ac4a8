"""The NVIDIA device plugin: DaemonSet, per-node configs in one ConfigMap, and the RBAC its config-manager needs.

Follows the layout of NVIDIA's own chart (k8s-device-plugin ``deployments/helm/nvidia-device-plugin``): a
``config-manager`` init container and sidecar copy the config named by the node's
``nvidia.com/device-plugin.config`` label from the ConfigMap into a shared volume and signal the plugin when the
label changes, which is why the pod shares its process namespace and may read Node objects.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from gpu_provision.k8s.device_plugin_config import device_plugin_config
from gpu_provision.k8s.images import with_registry
from gpu_provision.k8s.nodes import CONFIG_LABEL, MPS_LABEL, PRESENT_LABEL, plugin_config_name
from gpu_provision.k8s.objects import Obj, meta
from gpu_provision.k8s.runtime import gpu_nodes, runtime_class_name, uses_cdi
from gpu_provision.spec.model import Cluster
from gpu_provision.spec.namespaces import SYSTEM

NAMESPACE = SYSTEM
NAME = "nvidia-device-plugin"
CONFIGMAP = "nvidia-device-plugin-configs"
DEFAULT_CONFIG = "default"
MPS_ROOT = "/run/nvidia/mps"
MPS_VOLUMES = (
    {"name": "mps-root", "hostPath": {"path": MPS_ROOT, "type": "DirectoryOrCreate"}},
    {"name": "mps-shm", "hostPath": {"path": f"{MPS_ROOT}/shm"}},
)
#: Every node's config (the ConfigMap) and the one chosen for this node (written by the config manager).
CONFIG_VOLUMES = (
    {"name": "available-configs", "configMap": {"name": CONFIGMAP}},
    {"name": "config", "emptyDir": {}},
)
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def configs(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """Every distinct device plugin config of the cluster's GPU nodes by ConfigMap key, plus ``default``."""
    out: dict[str, dict[str, Any]] = {DEFAULT_CONFIG: {"version": "v1", "flags": {"migStrategy": "none"}}}
    for node in gpu_nodes(cluster):
        out[plugin_config_name(node)] = device_plugin_config(node)
    return out


def uses_mig(cluster: Cluster) -> bool:
    """Whether any config sets a MIG strategy other than ``none``."""
    return any(c["flags"]["migStrategy"] != "none" for c in configs(cluster).values())


def security_context(cluster: Cluster) -> dict[str, Any]:
    """The documented, unprivileged securityContext of NVIDIA's chart.

    Without MIG every capability is dropped. With a MIG strategy the chart adds SYS_ADMIN instead (the plugin
    then opens the MIG capability devices under /dev/nvidia-caps to monitor MIG devices); the API server refuses
    SYS_ADMIN together with ``allowPrivilegeEscalation: false``, so that setting is left to its default there.
    """
    if uses_mig(cluster):
        return {"capabilities": {"add": ["SYS_ADMIN"]}}
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def configmap(cluster: Cluster) -> Obj:
    """The ConfigMap holding one config per key (JSON text, which the plugin reads as YAML)."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(CONFIGMAP, NAMESPACE),
            "data": {name: json.dumps(config, indent=2, sort_keys=True) + "\n"
                     for name, config in sorted(configs(cluster).items())}}


def rbac(extra_rules: Sequence[dict[str, Any]] = ()) -> list[Obj]:
    """ServiceAccount, ClusterRole (read Nodes: the config-manager watches its node's label) and binding.

    + extra_rules: rules of the pods that share the account (GPU Feature Discovery's, as NVIDIA's chart adds them)
    """
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(NAME, NAMESPACE)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta(NAME),
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}, *extra_rules]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta(NAME),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]},
    ]


def _env(pairs: dict[str, str]) -> list[dict[str, Any]]:
    return [{"name": k, "value": v} for k, v in pairs.items()]


def uses_mps(cluster: Cluster) -> bool:
    """Whether any GPU node shares its GPUs through MPS (which needs NVIDIA's MPS control daemon)."""
    return any(n.sharing.strategy == "mps" for n in gpu_nodes(cluster))


def config_manager(cluster: Cluster, image: str, oneshot: bool, signal_process: str = "nvidia-device-plugin",
                    name_prefix: str = "nvidia-device-plugin") -> dict[str, Any]:
    env = _env({"ONESHOT": str(oneshot).lower(), "KUBECONFIG": ""})
    env.append({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    env += _env({
        "NODE_LABEL": CONFIG_LABEL,
        "CONFIG_FILE_SRCDIR": "/available-configs",
        "CONFIG_FILE_DST": "/config/config.yaml",
        "DEFAULT_CONFIG": DEFAULT_CONFIG,
        "FALLBACK_STRATEGIES": "named,single",
        "SEND_SIGNAL": "false" if oneshot else "true",
        # SIGHUP makes the plugin reload its config.
        "SIGNAL": "" if oneshot else "1",
        "PROCESS_TO_SIGNAL": "" if oneshot else signal_process,
    })
    return {
        "name": f"{name_prefix}-init" if oneshot else f"{name_prefix}-sidecar",
        "image": image,
        "command": ["config-manager"],
        "env": env,
        "securityContext": security_context(cluster),
        "volumeMounts": [{"name": "available-configs", "mountPath": "/available-configs"},
                         {"name": "config", "mountPath": "/config"}],
    }


def daemonset(cluster: Cluster) -> Obj:
    """The device plugin DaemonSet on nodes labelled ``nvidia.com/gpu.present=true``."""
    image = with_registry(cluster.kubernetes.device_plugin_image, cluster.mirrors.registry)
    env = {
        "CONFIG_FILE": "/config/config.yaml",
        "MPS_ROOT": MPS_ROOT,
        "FAIL_ON_INIT_ERROR": "true",
        "DEVICE_LIST_STRATEGY": "cdi-cri" if uses_cdi(cluster) else "envvar",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    }
    if uses_mig(cluster):
        env["NVIDIA_MIG_MONITOR_DEVICES"] = "all"
    plugin = {
        "name": "nvidia-device-plugin-ctr",
        "image": image,
        "command": ["nvidia-device-plugin"],
        "env": _env(env),
        "securityContext": security_context(cluster),
        "volumeMounts": [
            {"name": "kubelet-device-plugins-dir", "mountPath": "/var/lib/kubelet/device-plugins"},
            {"name": "mps-shm", "mountPath": "/dev/shm"},
            {"name": "mps-root", "mountPath": "/mps"},
            {"name": "cdi-root", "mountPath": "/var/run/cdi"},
            {"name": "available-configs", "mountPath": "/available-configs"},
            {"name": "config", "mountPath": "/config"},
        ],
    }
    pod: dict[str, Any] = {
        "serviceAccountName": NAME,
        "priorityClassName": "system-node-critical",
        "shareProcessNamespace": True,
        "nodeSelector": {PRESENT_LABEL: "true"},
        "tolerations": [GPU_TOLERATION],
        "initContainers": [config_manager(cluster, image, oneshot=True)],
        "containers": [config_manager(cluster, image, oneshot=False), plugin],
        "volumes": [
            {"name": "kubelet-device-plugins-dir",
             "hostPath": {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"}},
            *MPS_VOLUMES,
            {"name": "cdi-root", "hostPath": {"path": "/var/run/cdi", "type": "DirectoryOrCreate"}},
            *CONFIG_VOLUMES,
        ],
    }
    return system_daemonset(cluster, NAME, pod)


def mps_control_daemon(cluster: Cluster) -> Obj:
    """NVIDIA's MPS control daemon, on nodes labelled ``nvidia.com/mps.capable=true`` (see
    :mod:`gpu_provision.k8s.nodes`).

    The one privileged pod this project runs, as NVIDIA's chart documents it
    (``daemonset-mps-control-daemon.yml``): ``mount-shm`` mounts the MPS ``/dev/shm`` with bidirectional
    propagation and the daemon starts ``nvidia-cuda-mps-control`` for the node's GPUs; both need ``privileged``.
    The config-manager containers stay unprivileged.
    """
    image = with_registry(cluster.kubernetes.device_plugin_image, cluster.mirrors.registry)
    name = f"{NAME}-mps-control-daemon"
    env: list[dict[str, Any]] = [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    env += _env({"CONFIG_FILE": "/config/config.yaml", "NVIDIA_VISIBLE_DEVICES": "all",
                 "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"})
    if uses_mig(cluster):
        env += _env({"NVIDIA_MIG_MONITOR_DEVICES": "all"})
    configs = [{"name": "available-configs", "mountPath": "/available-configs"},
               {"name": "config", "mountPath": "/config"}]
    pod: dict[str, Any] = {
        "serviceAccountName": NAME,
        "priorityClassName": "system-node-critical",
        "shareProcessNamespace": True,
        "nodeSelector": {MPS_LABEL: "true"},
        "tolerations": [GPU_TOLERATION],
        "initContainers": [
            {"name": "mps-control-daemon-mounts", "image": image, "command": ["mps-control-daemon", "mount-shm"],
             "securityContext": {"privileged": True},
             "volumeMounts": [{"name": "mps-root", "mountPath": "/mps", "mountPropagation": "Bidirectional"}]},
            config_manager(cluster, image, oneshot=True, name_prefix="mps-control-daemon"),
        ],
        "containers": [
            config_manager(cluster, image, oneshot=False, signal_process="/usr/bin/mps-control-daemon",
                            name_prefix="mps-control-daemon"),
            {"name": "mps-control-daemon-ctr", "image": image, "command": ["mps-control-daemon"], "env": env,
             "securityContext": {"privileged": True},
             "volumeMounts": [{"name": "mps-shm", "mountPath": "/dev/shm"}, {"name": "mps-root", "mountPath": "/mps"},
                              *configs]},
        ],
        "volumes": [
            *MPS_VOLUMES,
            *CONFIG_VOLUMES,
        ],
    }
    return system_daemonset(cluster, name, pod)


def manifests(cluster: Cluster, extra_rules: Sequence[dict[str, Any]] = ()) -> list[Obj]:
    """Every object of the device plugin, in apply order (the MPS control daemon only where MPS is used).

    + extra_rules: further ClusterRole rules for pods running under the plugin's account (see :func:`rbac`)
    """
    return [*rbac(extra_rules), configmap(cluster), daemonset(cluster), *([mps_control_daemon(cluster)] if uses_mps(cluster)
                                                               else [])]


def system_daemonset(cluster: Cluster, name: str, pod: dict[str, Any]) -> Obj:
    """A kube-system DaemonSet ``name`` running ``pod`` (through the nvidia runtime class where there is one)."""
    runtime = runtime_class_name(cluster)
    if runtime:
        pod["runtimeClassName"] = runtime
    selector = {"app.kubernetes.io/name": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": meta(name, NAMESPACE, selector),
        "spec": {"selector": {"matchLabels": selector}, "updateStrategy": {"type": "RollingUpdate"},
                 "template": {"metadata": {"labels": selector}, "spec": pod}},
    }
