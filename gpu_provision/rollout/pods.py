"""Which pods on a node hold a GPU, which the rollout waits for, and which it may evict: pure reads of Pod objects.

A GPU pod is one whose containers (init containers included) request or limit an ``nvidia.com/`` resource (whole
GPUs, MIG devices, shared replicas). A pod that has finished (``Succeeded``/``Failed``) holds nothing. A pod being
deleted still holds its GPU until it is gone. Eviction follows ``kubectl drain``'s rules: DaemonSet pods and static
(mirror) pods are never evicted; a pod no controller manages only with ``force`` (nothing recreates it), and one
with an ``emptyDir`` volume only with ``delete_empty_dir`` (its data is lost).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

GPU_RESOURCE_PREFIX = "nvidia.com/"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
TERMINAL_PHASES = ("Succeeded", "Failed")


def ref(pod: dict[str, Any]) -> str:
    """``namespace/name``, as kubectl names a pod in its messages."""
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"


def _containers(pod: dict[str, Any]) -> Iterable[dict[str, Any]]:
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def gpu_resources(pod: dict[str, Any]) -> dict[str, int]:
    """The ``nvidia.com/`` resources the pod asks for (the larger of request and limit, summed over containers)."""
    out: dict[str, int] = {}
    for container in _containers(pod):
        resources = container.get("resources") or {}
        asked: dict[str, int] = {}
        for part in ("requests", "limits"):
            for name, value in (resources.get(part) or {}).items():
                if str(name).startswith(GPU_RESOURCE_PREFIX):
                    try:
                        count = int(str(value))
                    except ValueError:
                        count = 1
                    asked[name] = max(asked.get(name, 0), count)
        for name, count in asked.items():
            out[name] = out.get(name, 0) + count
    return out


def is_gpu_pod(pod: dict[str, Any]) -> bool:
    """Whether the pod asks for any ``nvidia.com/`` resource."""
    return any(count > 0 for count in gpu_resources(pod).values())


def finished(pod: dict[str, Any]) -> bool:
    """Whether the pod has run to its end (it holds no device any more)."""
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def selected(pod: dict[str, Any], selector: str | None) -> bool:
    """Whether the pod's labels match an equality-based label selector (``a=b,c!=d,e``); None matches every pod."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def jobs(pods: Iterable[dict[str, Any]], selector: str | None) -> list[dict[str, Any]]:
    """The pods the rollout waits for: running (not finished) pods matching ``selector``, or every GPU pod when
    there is no selector."""
    return [p for p in pods if not finished(p) and (selected(p, selector) if selector else is_gpu_pod(p))]


def holding(pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The GPU pods that still hold a GPU: not finished (a pod being deleted holds it until it is gone)."""
    return [p for p in pods if is_gpu_pod(p) and not finished(p)]


def owner_kind(pod: dict[str, Any]) -> str | None:
    """The kind of the pod's controller (``ReplicaSet``, ``Job``, ``DaemonSet``...), None for a bare pod."""
    for owner in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("controller"):
            return str(owner.get("kind"))
    return None


def has_empty_dir(pod: dict[str, Any]) -> bool:
    """Whether the pod has an ``emptyDir`` volume (lost with the pod)."""
    return any("emptyDir" in volume for volume in (pod.get("spec") or {}).get("volumes") or [])


def eviction_refusal(pod: dict[str, Any], force: bool, delete_empty_dir: bool) -> str | None:
    """Why ``kubectl drain``'s rules keep the rollout from evicting ``pod``, None when it may be evicted."""
    if MIRROR_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {}):
        return "a static pod (its kubelet runs it from a file)"
    if owner_kind(pod) == "DaemonSet":
        return "managed by a DaemonSet"
    if owner_kind(pod) is None and not force:
        return "no controller manages it, nothing would recreate it (force allows it)"
    if has_empty_dir(pod) and not delete_empty_dir:
        return "its emptyDir data would be lost (delete_empty_dir allows it)"
    return None


def drainable(pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods a drain must remove: every pod not finished, except DaemonSet and static pods."""
    return [p for p in pods if not finished(p) and owner_kind(p) != "DaemonSet"
            and MIRROR_ANNOTATION not in ((p.get("metadata") or {}).get("annotations") or {})]
