"""Every manifest this project applies, by name (the name is also the manifest's file name on the control plane)."""

from __future__ import annotations

from gpu_provision.k8s import device_plugin, dra, feature_discovery, monitoring, teams
from gpu_provision.k8s.objects import Obj
from gpu_provision.k8s.runtime import gpu_nodes, runtime_class, runtime_class_name
from gpu_provision.spec.model import Cluster


def manifests(cluster: Cluster) -> dict[str, list[Obj]]:
    """Manifest name -> objects in apply order; empty manifests are left out. The DRA driver comes before the
    teams, whose ResourceClaimTemplates name its DeviceClasses."""
    out: dict[str, list[Obj]] = {}
    if gpu_nodes(cluster):
        runtime = [runtime_class()] if runtime_class_name(cluster) else []
        # One allocator per cluster: the DRA driver and the device plugin must never serve the same GPUs.
        if cluster.kubernetes.dra:
            out["dra-driver"] = runtime + dra.manifests(cluster) + feature_discovery.without_plugin(cluster)
        else:
            out["device-plugin"] = [*runtime,
                                    *device_plugin.manifests(cluster, feature_discovery.rbac_rules(cluster)),
                                    feature_discovery.daemonset(cluster)]
    team_objects = [obj for team in cluster.kubernetes.teams for obj in teams.manifests(team, cluster.kubernetes)]
    if team_objects:
        out["teams"] = team_objects
    monitoring_objects = monitoring.manifests(cluster)
    if monitoring_objects:
        out["monitoring"] = monitoring_objects
    return out
