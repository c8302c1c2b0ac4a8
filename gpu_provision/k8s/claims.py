"""A team's GPUs under DRA: ResourceClaimTemplates to ask for them, quota on the devices its claims request, and
the rights to use claims.

Quota counts devices per DeviceClass (``<class>.deviceclass.resource.k8s.io/devices``, Kubernetes' DRA quota):
the team's own numbers on ``gpu.nvidia.com`` and on each MIG profile's class, 0 on every other class this project
renders, so a claim through the generic ``mig.nvidia.com`` or ``vfio.gpu.nvidia.com`` class cannot go around the
per-profile numbers. ``count/resourceclaims.resource.k8s.io`` bounds the team's ResourceClaim objects by the
devices it may hold (each of its templates claims one device), which also caps claims through a DeviceClass this
project does not render and so has no device key for. ``requests.nvidia.com/gpu`` stays in the quota for pods that
ask for ``nvidia.com/gpu`` the old way, which the ``gpu.nvidia.com`` class's ``extendedResourceName`` serves. The
keys are Kubernetes' own (``gpu_provision/data/dra.json``, ``quota``).
"""

from __future__ import annotations

from typing import Any

from gpu_provision.k8s import dra
from gpu_provision.k8s.objects import Obj, meta
from gpu_provision.spec.dradata import QUOTA_CLAIMS, QUOTA_DEVICES
from gpu_provision.spec.model import Kubernetes, Team

#: The template a pod names for one whole GPU.
GPU_TEMPLATE = "gpu"
#: What a team does with claims in its own namespace: claim devices itself, or use the templates it was given.
RULES: list[dict[str, Any]] = [
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"],
     "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaimtemplates"], "verbs": ["get", "list", "watch"]},
]


def quota_key(device_class: str) -> str:
    """The ResourceQuota key counting the devices claimed through ``device_class``."""
    return QUOTA_DEVICES.format(device_class=device_class)


def template_name(profile: str) -> str:
    """The ResourceClaimTemplate of one MIG profile (``1g.18gb`` -> ``mig-1g-18gb``)."""
    return dra.profile_class(profile).removesuffix(f".{dra.GPU_CLASS}")


def _template(team: Team, name: str, device_class: str) -> Obj:
    request = {"name": "gpu", "exactly": {"deviceClassName": device_class}}
    return {"apiVersion": dra.API, "kind": "ResourceClaimTemplate", "metadata": meta(name, team.namespace),
            "spec": {"spec": {"devices": {"requests": [request]}}}}


def templates(team: Team) -> list[Obj]:
    """One template for a whole GPU (when the team may use any) and one per MIG profile it may use."""
    out = [_template(team, GPU_TEMPLATE, dra.GPU_CLASS)] if team.gpus else []
    out += [_template(team, template_name(p), dra.profile_class(p)) for p, n in sorted(team.mig.items()) if n]
    return out


def quota(team: Team, k8s: Kubernetes) -> Obj:
    """ResourceQuota on the devices of every DeviceClass (the team's numbers, 0 elsewhere), on the number of its
    ResourceClaims (the devices it may hold in all) and on the ``nvidia.com/gpu`` and ``nvidia.com/mig-<profile>``
    extended resources the classes serve."""
    allowed = {dra.GPU_CLASS: team.gpus, **{dra.profile_class(p): n for p, n in team.mig.items()}}
    hard = {quota_key(name): str(allowed.get(name, 0)) for name in dra.class_names(k8s)}
    hard[QUOTA_CLAIMS] = str(sum(allowed.values()))
    hard["requests.nvidia.com/gpu"] = str(team.gpus)
    for profile, count in sorted(team.mig.items()):
        resource = dra.profile_resource(profile)
        if resource:
            hard[f"requests.{resource}"] = str(count)
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta("gpu-quota", team.namespace),
            "spec": {"hard": dict(sorted(hard.items()))}}
