"""How GPU pods reach the NVIDIA container runtime: a RuntimeClass when it is not the default, CDI when enabled."""

from __future__ import annotations

from gpu_provision.k8s.nodes import schedules_gpus
from gpu_provision.k8s.objects import Obj, meta
from gpu_provision.spec.model import Cluster, Node

#: The RuntimeClass (and containerd runtime handler) ``nvidia-ctk runtime configure`` registers.
RUNTIME_CLASS = "nvidia"


def gpu_nodes(cluster: Cluster) -> list[Node]:
    """Nodes whose GPUs Kubernetes schedules."""
    return [n for n in cluster.nodes if schedules_gpus(n)]


def runtime_class_name(cluster: Cluster) -> str | None:
    """``nvidia`` when some GPU node keeps another default runtime (GPU pods must then ask for it), else None."""
    return RUNTIME_CLASS if any(not n.toolkit.default_runtime for n in gpu_nodes(cluster)) else None


def uses_cdi(cluster: Cluster) -> bool:
    """Whether every GPU node has CDI on, so the device plugin can hand devices to containerd as CDI names."""
    nodes = gpu_nodes(cluster)
    return bool(nodes) and all(n.toolkit.cdi for n in nodes)


def runtime_class() -> Obj:
    """The ``nvidia`` RuntimeClass (handler registered in containerd by the toolkit)."""
    return {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": meta(RUNTIME_CLASS),
            "handler": RUNTIME_CLASS}
