"""Every manifest this project applies, by name (the name is also the manifest's file name on the control plane)."""

from __future__ import annotations

import dataclasses

from gpu_provision.k8s import device_plugin, dra, feature_discovery, monitoring, teams
from gpu_provision.k8s.objects import Obj, key
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


def other_allocator(cluster: Cluster) -> list[Obj]:
    """What the other ``kubernetes.gpu_allocation`` renders for the GPUs that this one does not (its DaemonSets,
    RBAC, configuration and, for DRA, DeviceClasses): left in the cluster by a switch of modes, these are deleted,
    since two allocators handing out the same GPUs give one GPU to two pods."""
    if not gpu_nodes(cluster):
        return []
    k8s = cluster.kubernetes
    other = dataclasses.replace(cluster, kubernetes=dataclasses.replace(
        k8s, gpu_allocation="device-plugin" if k8s.dra else "dra"))
    kept = {key(obj) for objs in manifests(cluster).values() for obj in objs}
    return [obj for obj in manifests(other).get("device-plugin" if k8s.dra else "dra-driver", [])
            if key(obj) not in kept]
