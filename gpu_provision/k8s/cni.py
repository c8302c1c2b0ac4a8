"""Where each CNI's manifest comes from and which DaemonSet shows it is installed."""

from __future__ import annotations

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
    """``cni_manifest`` from the file, else the CNI's upstream manifest (None: nothing to apply from)."""
    return cluster.kubernetes.cni_manifest or cni(cluster).manifest
