"""The namespaces this project and Kubernetes itself use, which a team's namespace must not take.

The cluster file's checks refuse them for teams; the renderers in :mod:`gpu_provision.k8s` put their objects there.
"""

from __future__ import annotations

#: The device plugin's and CNI DaemonSets' namespace.
SYSTEM = "kube-system"
#: The DCGM exporter's namespace.
MONITORING = "gpu-monitoring"
#: The in-cluster verification DaemonSet's namespace (``gpu-provision verify --in-cluster``'s default).
VERIFICATION = "gpu-provision"
#: Namespaces that Kubernetes creates; every ``kube-`` name is Kubernetes' own (kube-system, kube-public,
#: kube-node-lease) or a system component's (kube-flannel).
KUBERNETES = ("default", "kube-system", "kube-public", "kube-node-lease")
RESERVED_PREFIX = "kube-"
#: What a team may take, in plain words for messages.
ALLOWED = f"any namespace but default, {MONITORING}, {VERIFICATION} and {RESERVED_PREFIX}*"


def reserved(namespace: str) -> str | None:
    """Why ``namespace`` cannot hold a team (None when it can).

    A team's Role, quota, LimitRange and Pod Security labels would land on objects that Kubernetes or this project
    runs, loosening or breaking them.

    >>> reserved("kube-system")
    'Kubernetes reserves it'
    >>> reserved("research") is None
    True
    """
    if namespace in KUBERNETES or namespace.startswith(RESERVED_PREFIX):
        return "Kubernetes reserves it"
    if namespace in (MONITORING, VERIFICATION):
        return "gpu-provision runs its own pods there"
    return None

