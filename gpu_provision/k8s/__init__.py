"""Kubernetes objects and kubeadm configurations rendered from the cluster file.

Every function here is pure: it takes the typed model (:mod:`gpu_provision.spec.model`) and returns plain dicts
that serialise to JSON. The stage (:mod:`gpu_provision.stages.kubernetes`) writes them to the control plane and
applies them; the tests validate every one against the Kubernetes API schemas of the cluster's version.

- ``images``: the registry override for container images (air-gapped sites).
- ``objects``: metadata helpers, the content hash that marks applied objects, ``List`` documents.
- ``kubeadm``: InitConfiguration/ClusterConfiguration/KubeletConfiguration and JoinConfiguration.
- ``cni``: the default manifest location and the DaemonSet that shows a CNI is installed.
- ``nodes``: the labels and taints each node should carry.
- ``device_plugin``: the NVIDIA device plugin DaemonSet, its per-node configs and RBAC.
- ``dra``: NVIDIA's DRA driver (``kubernetes.gpu_allocation: dra``): kubelet plugin DaemonSet, RBAC, DeviceClasses
  and the feature gates its Kubernetes version needs.
- ``feature_discovery``: NVIDIA's GPU Feature Discovery DaemonSet beside the device plugin.
- ``teams``: a namespace, quota, role, binding and limit range per team.
- ``claims``: under DRA, a team's ResourceClaimTemplates, its quota on claimed devices and its rights on claims.
- ``monitoring``: the DCGM exporter and the Prometheus scrape configuration.
- ``applied``: every manifest this project applies, by name.
"""
