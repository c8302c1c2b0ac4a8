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
- ``feature_discovery``: NVIDIA's GPU Feature Discovery DaemonSet beside the device plugin.
- ``teams``: a namespace, quota, role, binding and limit range per team.
- ``monitoring``: the DCGM exporter and the Prometheus scrape configuration.
- ``bundle``: every manifest this project applies, by name.
"""
