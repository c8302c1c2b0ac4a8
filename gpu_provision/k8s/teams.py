"""Per-team objects: a namespace under a Pod Security Standard, a GPU quota, a role with what a team needs, its
binding and a default limit range; under DRA also its ResourceClaimTemplates (:mod:`gpu_provision.k8s.claims`)."""

from __future__ import annotations

from typing import Any

from gpu_provision.k8s import claims
from gpu_provision.k8s.objects import Obj, meta
from gpu_provision.spec.model import Kubernetes, Team

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


#: Pod Security Admission's namespace labels (https://kubernetes.io/docs/concepts/security/pod-security-admission/).
POD_SECURITY_LABEL = "pod-security.kubernetes.io"
POD_SECURITY_MODES = ("enforce", "audit", "warn")


def pod_security_labels(level: str, k8s: Kubernetes) -> dict[str, str]:
    """Pod Security Admission labels enforcing, auditing and warning at ``level``.

    ``enforce-version`` is the cluster's minor (``v1.31``), not ``latest``: the rules a namespace enforces then change
    only when the cluster file's Kubernetes version does, never under running workloads at an upgrade. ``audit`` and
    ``warn`` follow ``latest`` so the next release's stricter rules show up as warnings before they are enforced.
    """
    out = {f"{POD_SECURITY_LABEL}/{mode}": level for mode in POD_SECURITY_MODES}
    out[f"{POD_SECURITY_LABEL}/enforce-version"] = f"v{k8s.minor}"
    out.update({f"{POD_SECURITY_LABEL}/{mode}-version": "latest" for mode in ("audit", "warn")})
    return out


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
    """The users, groups and service accounts (of the team's own namespace) bound to the team's role."""
    out = [{"kind": "User", "name": u, "apiGroup": "rbac.authorization.k8s.io"} for u in team.users]
    out += [{"kind": "Group", "name": g, "apiGroup": "rbac.authorization.k8s.io"} for g in team.groups]
    out += [{"kind": "ServiceAccount", "name": a, "namespace": team.namespace} for a in team.service_accounts]
    return out


def manifests(team: Team, k8s: Kubernetes) -> list[Obj]:
    """Namespace (with its Pod Security labels), ResourceQuota, Role, RoleBinding (when the team names users or
    groups) and LimitRange; under DRA the quota counts claimed devices, the role may use claims and the team's
    ResourceClaimTemplates come last."""
    labels = {TEAM_LABEL: team.name, **pod_security_labels(k8s.team_pod_security(team), k8s)}
    out: list[Obj] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": meta(team.namespace, labels=labels)},
        claims.quota(team, k8s) if k8s.dra else quota(team),
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(ROLE, team.namespace),
         "rules": RULES + claims.RULES if k8s.dra else RULES},
    ]
    if subjects(team):
        out.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": meta(ROLE, team.namespace),
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE},
                    "subjects": subjects(team)})
    out.append({"apiVersion": "v1", "kind": "LimitRange", "metadata": meta("default-limits", team.namespace),
                "spec": {"limits": [{"type": "Container", "default": dict(DEFAULT_LIMITS),
                                     "defaultRequest": dict(DEFAULT_REQUESTS)}]}})
    if k8s.dra:
        out += claims.templates(team)
    return out
