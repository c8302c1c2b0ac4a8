"""Per-team objects: a namespace, a GPU quota, a role with what a team needs, its binding and a default limit range."""

from __future__ import annotations

from typing import Any

from gpu_provision.k8s.objects import Obj, meta
from gpu_provision.spec.model import Team

ROLE = "gpu-team"
TEAM_LABEL = "gpu-provision/team"

#: What a team does in its own namespace: run and inspect workloads. It may read, not change, its quota and limits;
#: roles, bindings, secrets of others and cluster-scoped objects stay out of reach.
RULES: list[dict[str, Any]] = [
    {"apiGroups": [""],
     "resources": ["pods", "services", "configmaps", "persistentvolumeclaims", "serviceaccounts"],
     "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
    {"apiGroups": [""], "resources": ["pods/log", "events", "resourcequotas", "limitranges"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/exec", "pods/portforward"], "verbs": ["create", "get"]},
    {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets", "replicasets"],
     "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
    {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"],
     "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
]

#: Defaults for containers that state no resources, so the quota's CPU/memory-free namespace still schedules sanely.
DEFAULT_LIMITS = {"cpu": "2", "memory": "8Gi"}
DEFAULT_REQUESTS = {"cpu": "250m", "memory": "512Mi"}


def quota_resource(profile: str) -> str:
    """The quota key of a MIG profile (``1g.18gb`` -> ``requests.nvidia.com/mig-1g.18gb``), as the device plugin
    names MIG resources under the ``mixed`` strategy."""
    return f"requests.nvidia.com/mig-{profile}"


def quota(team: Team) -> Obj:
    """ResourceQuota on whole GPUs and on each MIG resource the team may use."""
    hard = {"requests.nvidia.com/gpu": str(team.gpus)}
    hard.update({quota_resource(p): str(n) for p, n in sorted(team.mig.items())})
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta("gpu-quota", team.namespace),
            "spec": {"hard": hard}}


def subjects(team: Team) -> list[dict[str, str]]:
    """The users and groups bound to the team's role."""
    out = [{"kind": "User", "name": u, "apiGroup": "rbac.authorization.k8s.io"} for u in team.users]
    out += [{"kind": "Group", "name": g, "apiGroup": "rbac.authorization.k8s.io"} for g in team.groups]
    return out


def manifests(team: Team) -> list[Obj]:
    """Namespace, ResourceQuota, Role, RoleBinding (when the team names users or groups) and LimitRange."""
    labels = {TEAM_LABEL: team.name}
    out: list[Obj] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": meta(team.namespace, labels=labels)},
        quota(team),
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(ROLE, team.namespace),
         "rules": RULES},
    ]
    if subjects(team):
        out.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": meta(ROLE, team.namespace),
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE},
                    "subjects": subjects(team)})
    out.append({"apiVersion": "v1", "kind": "LimitRange", "metadata": meta("default-limits", team.namespace),
                "spec": {"limits": [{"type": "Container", "default": dict(DEFAULT_LIMITS),
                                     "defaultRequest": dict(DEFAULT_REQUESTS)}]}})
    return out
