"""Where each CNI's manifest comes from and which DaemonSet shows it is installed."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from gpu_provision.spec.model import Cluster


@dataclass(frozen=True)
class Cni:
    """A CNI plugin's upstream manifest and the DaemonSet it creates."""

    manifest: str | None
    namespace: str
    daemonset: str


#: Upstream manifests of the pinned releases. Cilium publishes none (it installs through its CLI or Helm), so a
#: cluster using it names a rendered manifest in ``kubernetes.cni_manifest``.
CNIS = {
    "flannel": Cni("https://github.com/flannel-io/flannel/releases/download/v0.26.4/kube-flannel.yml",
                   "kube-flannel", "kube-flannel-ds"),
    "calico": Cni("https://raw.githubusercontent.com/projectcalico/calico/v3.29.2/manifests/calico.yaml",
                  "kube-system", "calico-node"),
    "cilium": Cni(None, "kube-system", "cilium"),
}


def cni(cluster: Cluster) -> Cni:
    """The cluster's CNI."""
    return CNIS[cluster.kubernetes.cni]


def manifest_source(cluster: Cluster) -> str | None:
    """``cni_manifest`` from the file, else the CNI's upstream manifest (None: nothing to apply from).

    A relative path is taken from the cluster file's directory, like the file's other paths.
    """
    given = cluster.kubernetes.cni_manifest
    if not given:
        return cni(cluster).manifest
    if re.match(r"^[a-z]+://", given) or os.path.isabs(given):
        return given
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(cluster.source)), os.path.expanduser(given)))
