"""A member's Kubernetes moved to the cluster file's version in the order kubeadm's upgrade guide gives.

``packages.json`` ``kubernetes.upgrade`` holds the commands, with their source: on a node that is already part of
the cluster, kubeadm is brought to the file's version first (:func:`kubeadm_first`); then the first control plane
runs ``kubeadm upgrade apply`` (:func:`control_plane`) and every other member ``kubeadm upgrade node``
(:func:`node`); only then are kubelet and kubectl changed (the stage's package operation), and a kubelet still
running its replaced binary is restarted (:func:`kubelet_restarted`). Every host calls these operations in this
order, so pyinfra runs each on all hosts before the next: the control plane is upgraded before any other member
asks it for its new configuration. A rollout runs control planes in batches of their own, before the workers.

The same steps move a cluster back to a lower patch of its minor (kubeadm's version policy does not refuse it);
preflight refuses a minor downgrade or skipped minors before anything runs (``stages.preflight``). A node that
has not joined yet is left to ``kubeadm init``/``join``, which install the file's version from the start.

Each step is decided again when it executes, from the node as the steps before left it, so a run that was
interrupted half-way finishes the upgrade on the next run: the control plane's version is read from the API,
another member's from its installed kubelet, and the restart from whether the running kubelet started before its
binary was replaced (the probe's ``kubelet_restart_due``).
"""

from __future__ import annotations

from pyinfra.api import operation

from gpu_provision.desired import PackageWant, request_for
from gpu_provision.operations import packages
from gpu_provision.operations.commands import current_state, mark_changed, this_host
from gpu_provision.operations.files import changed_paths
from gpu_provision.operations.kubernetes.probe import (
    ADMIN_CONF,
    KUBELET_CONF,
    api_or_fail,
    kubernetes_request,
    kubernetes_section,
)
from gpu_provision.spec.vendordata import package_data
from gpu_provision.state import NodeStateData

_LOG = "/var/log/gpu-provision-kubeadm-upgrade.log"


def steps() -> dict[str, str]:
    """The upgrade's commands and the kubelet's path (``packages.json`` ``kubernetes.upgrade``)."""
    return dict(package_data()["kubernetes"]["upgrade"])


def member(state: NodeStateData) -> bool:
    """Whether kubeadm has made the node part of a cluster (as a control plane or by joining)."""
    section = kubernetes_section(state)
    return bool(section.get("admin_conf") or section.get("kubelet_conf"))


def upstream(version: str | None) -> str | None:
    """The upstream version of a Kubernetes package's version (``1.36.4`` of ``1.36.4-1.1``), None for None."""
    return version.split(":")[-1].rsplit("-", 1)[0] if version else None


def logged(command: str) -> str:
    """``command`` with its output in the upgrade log, whose last lines a failure shows."""
    return f"{command} > {_LOG} 2>&1 || {{ rc=$?; tail -n 20 {_LOG} >&2; exit $rc; }}"


def apply_command(version: str) -> str:
    """The first control plane's command: ``kubeadm upgrade apply --yes vX.Y.Z``."""
    return steps()["first_control_plane"].format(version=version)


def kubelet_behind(state: NodeStateData, version: str) -> str | None:
    """Why this member's kubelet package must move to ``version`` (its installed version), None when it is there."""
    have = upstream(state.package("kubelet").version)
    if not member(state) or have is None or have == version:
        return None
    return f"kubelet {have} is installed, the file wants {version}"


@operation()
def kubeadm_first(want: PackageWant, lock_timeout: int = packages.LOCK_TIMEOUT):
    """On a member whose kubelet is not at the file's version, kubeadm alone at that version first.

    + want: the kubeadm package at the file's version, held
    + lock_timeout: as for :func:`gpu_provision.operations.packages.wants`

    A node that has not joined gets kubeadm with kubelet and kubectl in one step, as a fresh install does.

    .. code:: python

        upgrade.kubeadm_first(name="kubeadm 1.36.4 first", want=PackageWant("kubeadm", "1.36.4", held=True))
    """
    host = this_host()
    state = current_state(host, request_for([want, PackageWant("kubelet")]).merge(kubernetes_request()))
    if kubelet_behind(state, str(want.version)) is None:
        host.noop("no member's upgrade waits on kubeadm")
        return
    repositories_changed = any(p.startswith(packages.REPOSITORY_PREFIXES) for p in changed_paths(host))
    commands = packages.plan([want], state, repositories_changed, lock_timeout)
    if not commands:
        host.noop(f"kubeadm already at {want.version}")
        return
    mark_changed(host)
    yield from commands


@operation()
def control_plane(version: str, first_control_plane: str):
    """The cluster's control plane at ``version``: ``kubeadm upgrade apply`` on the first control plane.

    + version: the cluster file's Kubernetes version (``1.36.4``)
    + first_control_plane: inventory name of the node that runs it; every other host does nothing

    Runs when the API reports another version in kubeadm's ClusterConfiguration; not before ``kubeadm init``.

    .. code:: python

        upgrade.control_plane(name="kubeadm upgrade apply", version="1.36.4", first_control_plane="cp-01")
    """
    host = this_host()
    if host.name != first_control_plane:
        host.noop(f"{first_control_plane} upgrades the control plane")
        return
    state = current_state(host, kubernetes_request(ADMIN_CONF))
    section = kubernetes_section(state)
    if not section.get("admin_conf"):
        host.noop("no cluster yet: kubeadm init makes it at the file's version")
        return
    api, failure = api_or_fail(host, state, "kubeadm upgrade apply")
    if failure:
        yield failure
        return
    if (api or {}).get("cluster_version") == f"v{version}":
        host.noop(f"control plane runs v{version}")
        return
    mark_changed(host)
    yield logged(apply_command(version))


@operation()
def node(version: str, first_control_plane: str):
    """Every other member's kubeadm configuration for ``version``: ``kubeadm upgrade node`` (on a further control
    plane it also moves that node's control plane components), while its kubelet is not yet at ``version``.

    + version: the cluster file's Kubernetes version
    + first_control_plane: inventory name of the node :func:`control_plane` upgrades (it does nothing here)

    .. code:: python

        upgrade.node(name="kubeadm upgrade node", version="1.36.4", first_control_plane="cp-01")
    """
    host = this_host()
    if host.name == first_control_plane:
        host.noop("kubeadm upgrade apply upgraded this node")
        return
    state = current_state(host, request_for([PackageWant("kubelet")]).merge(kubernetes_request(KUBELET_CONF)))
    if kubelet_behind(state, version) is None:
        host.noop(f"not a member, or kubelet already at {version}")
        return
    mark_changed(host)
    yield logged(steps()["other_nodes"])


@operation()
def kubelet_restarted():
    """kubelet restarted when it still runs a binary the package manager has since replaced (the guide's
    ``systemctl daemon-reload`` and ``systemctl restart kubelet`` after kubelet's upgrade).

    .. code:: python

        upgrade.kubelet_restarted(name="kubelet restarted at its new version")
    """
    host = this_host()
    state = current_state(host, kubernetes_request())
    if not kubernetes_section(state).get("kubelet_restart_due"):
        host.noop("kubelet runs its installed binary")
        return
    mark_changed(host)
    yield steps()["kubelet_restart"]
