"""GPU monitoring: the DCGM exporter DaemonSet, a Prometheus scrape configuration for it and the GPU dashboard on
its metrics (``k8s.dashboard``)."""

from __future__ import annotations

from typing import Any

import yaml

from gpu_provision.k8s import dashboard
from gpu_provision.k8s.device_plugin import GPU_TOLERATION
from gpu_provision.k8s.endpoints import host_port
from gpu_provision.k8s.images import with_registry
from gpu_provision.k8s.nodes import PRESENT_LABEL
from gpu_provision.k8s.objects import Obj, meta
from gpu_provision.k8s.runtime import gpu_nodes, runtime_class_name
from gpu_provision.spec.model import Cluster
from gpu_provision.spec.namespaces import MONITORING

NAMESPACE = MONITORING
NAME = "dcgm-exporter"
PORT = 9400
#: The scrape job's name: the dashboard's queries select on it.
SCRAPE_JOB = NAME


def daemonset(cluster: Cluster) -> Obj:
    """The DCGM exporter on every GPU node, serving metrics on the node's port 9400."""
    image = with_registry(cluster.kubernetes.monitoring.dcgm_exporter_image, cluster.mirrors.registry)
    selector = {"app.kubernetes.io/name": NAME}
    container = {
        "name": NAME,
        "image": image,
        "env": [{"name": "DCGM_EXPORTER_LISTEN", "value": f":{PORT}"},
                {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"}],
        "ports": [{"name": "metrics", "containerPort": PORT, "hostPort": PORT}],
        # NVIDIA's dcgm-exporter manifests add SYS_ADMIN: DCGM needs it for profiling metrics (DCP). Not privileged.
        "securityContext": {"runAsNonRoot": False, "runAsUser": 0, "capabilities": {"add": ["SYS_ADMIN"]}},
        "volumeMounts": [{"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources",
                          "readOnly": True}],
    }
    pod: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "nodeSelector": {PRESENT_LABEL: "true"},
        "tolerations": [GPU_TOLERATION],
        "containers": [container],
        "volumes": [{"name": "pod-resources", "hostPath": {"path": "/var/lib/kubelet/pod-resources"}}],
    }
    runtime = runtime_class_name(cluster)
    if runtime:
        pod["runtimeClassName"] = runtime
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": meta(NAME, NAMESPACE, selector),
        "spec": {"selector": {"matchLabels": selector}, "template": {"metadata": {"labels": selector}, "spec": pod}},
    }


def manifests(cluster: Cluster) -> list[Obj]:
    """The monitoring namespace, the exporter and the dashboard on its metrics, or nothing when the file turns the
    exporter off. The dashboard is a ConfigMap only: without a Grafana whose sidecar watches this namespace it
    does nothing."""
    if not cluster.kubernetes.monitoring.dcgm_exporter or not gpu_nodes(cluster):
        return []
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": meta(NAMESPACE)}, daemonset(cluster),
            dashboard.configmap(NAMESPACE, SCRAPE_JOB)]


def scrape_config(cluster: Cluster) -> str:
    """A Prometheus ``scrape_configs`` file with one target per GPU node (the exporter's host port; an IPv6 address
    in brackets, as Prometheus reads ``host:port``)."""
    targets = [{"targets": [host_port(n.address, PORT)], "labels": {"node": n.name, "cluster": cluster.name}}
               for n in gpu_nodes(cluster)]
    doc = {"scrape_configs": [{"job_name": SCRAPE_JOB, "scrape_interval": "15s", "static_configs": targets}]}
    header = "# Written by gpu-provision from the cluster file; changes here are overwritten.\n"
    return header + yaml.safe_dump(doc, sort_keys=False)
